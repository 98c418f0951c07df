module github.com/fv-streams/functions/text-stats-go

go 1.24

require github.com/extism/go-pdk v1.1.3
