// text-stats: a map in Go. Each row gets `words` (whitespace-separated words of `text`) and
// `chars` (Unicode code points of `text`); a row whose text is null gets an error result, so it
// becomes poison with reason "plugin_error" while the rest of the batch goes on.
//
// Built with GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared (see build.sh). Standard Go on
// wasip1 needs WASI, which the Extism JS SDK provides on Node only.
package main

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/extism/go-pdk"
)

type batch struct {
	Rows []map[string]any `json:"rows"`
}

type results struct {
	Results []any `json:"results"`
}

//go:wasmexport transform
func transform() int32 {
	var in batch
	if err := json.Unmarshal(pdk.Input(), &in); err != nil {
		pdk.SetError(err)
		return 1
	}
	out := results{Results: make([]any, len(in.Rows))}
	for i, row := range in.Rows {
		text, ok := row["text"].(string)
		if !ok {
			out.Results[i] = map[string]string{"error": "text is not a string"}
			continue
		}
		row["words"] = len(strings.Fields(text))
		row["chars"] = utf8.RuneCountInString(text)
		out.Results[i] = []any{row}
	}
	bytes, err := json.Marshal(out)
	if err != nil {
		pdk.SetError(err)
		return 1
	}
	pdk.Output(bytes)
	return 0
}

func main() {}
