module warden.example/policies

go 1.26

require (
	github.com/tidwall/gjson v1.18.0
	github.com/tidwall/sjson v1.2.5
	warden.test/policies v0.0.0
)

require (
	github.com/tidwall/match v1.1.1 // indirect
	github.com/tidwall/pretty v1.2.0 // indirect
)

// The guest helpers (the waPC and WASI guests and the response documents)
// live with Warden's test policies.
replace warden.test/policies => ../../testdata/policies
