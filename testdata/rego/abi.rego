# Exercises the OPA wasm ABI: input, data, and builtins left to the host
# (sprintf, units.parse_bytes) called with strings, arrays and sets, whose
# results may be undefined.
package abi

default greeting := "none"

greeting := sprintf("%s, %s", [data.greeting, input.name])

default size := "undefined"

size := units.parse_bytes(input.size)

members := {m | some m in input.members}

result := {
	"greeting": greeting,
	"size": size,
	"described": sprintf("%v", [members]),
	"count": count(members),
}
