// Package jsonscan reads values out of a JSON document without decoding it:
// one forward pass, no allocation and few function calls, because calls are
// expensive in Go's WebAssembly code (a gjson lookup of a 1.6 KB request
// costs ~45 µs in a guest; this scan a few). The document must be valid
// JSON: the host hands guests only JSON it has parsed. Keys are compared as
// they are written, without unescaping; of duplicate keys the first wins.
package jsonscan

// Get returns the raw value at the path of object keys, or nil when a key is
// missing or a step is not an object.
func Get(doc []byte, path ...string) []byte {
	i := 0
	for _, key := range path {
		i = space(doc, i)
		if i >= len(doc) || doc[i] != '{' {
			return nil
		}
		i++
		for {
			i = space(doc, i)
			if i >= len(doc) || doc[i] != '"' {
				return nil // '}' or malformed: the key is not there
			}
			end := stringEnd(doc, i)
			if end < 0 {
				return nil
			}
			k := doc[i+1 : end]
			i = space(doc, end+1)
			if i >= len(doc) || doc[i] != ':' {
				return nil
			}
			i = space(doc, i+1)
			if string(k) == key {
				break
			}
			if i = valueEnd(doc, i); i < 0 {
				return nil
			}
			if i = space(doc, i); i < len(doc) && doc[i] == ',' {
				i++
			}
		}
	}
	end := valueEnd(doc, i)
	if end < 0 {
		return nil
	}
	return doc[i:end]
}

// Keys calls fn with each key of a raw object, as written.
func Keys(obj []byte, fn func(key []byte) bool) {
	i := space(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i++
	for {
		i = space(obj, i)
		if i >= len(obj) || obj[i] != '"' {
			return
		}
		end := stringEnd(obj, i)
		if end < 0 || !fn(obj[i+1:end]) {
			return
		}
		i = space(obj, end+1)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		if i = valueEnd(obj, space(obj, i+1)); i < 0 {
			return
		}
		if i = space(obj, i); i < len(obj) && obj[i] == ',' {
			i++
		}
	}
}

// Strings calls fn with each string element of a raw array, as written;
// ok is false when arr is not an array of strings.
func Strings(arr []byte, fn func(s []byte)) (ok bool) {
	i := space(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return false
	}
	i = space(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return true
	}
	for i < len(arr) {
		if arr[i] != '"' {
			return false
		}
		end := stringEnd(arr, i)
		if end < 0 {
			return false
		}
		fn(arr[i+1 : end])
		i = space(arr, end+1)
		if i < len(arr) && arr[i] == ']' {
			return true
		}
		if i >= len(arr) || arr[i] != ',' {
			return false
		}
		i = space(arr, i+1)
	}
	return false
}

func space(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\n' || doc[i] == '\t' || doc[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index of the quote closing the string that opens at
// i, or -1.
func stringEnd(doc []byte, i int) int {
	for j := i + 1; j < len(doc); j++ {
		switch doc[j] {
		case '\\':
			j++
		case '"':
			return j
		}
	}
	return -1
}

// valueEnd returns the index just past the value that starts at i, or -1.
func valueEnd(doc []byte, i int) int {
	if i >= len(doc) {
		return -1
	}
	switch doc[i] {
	case '"':
		if end := stringEnd(doc, i); end >= 0 {
			return end + 1
		}
		return -1
	case '{', '[':
		depth := 0
		for ; i < len(doc); i++ {
			switch doc[i] {
			case '"':
				if i = stringEnd(doc, i); i < 0 {
					return -1
				}
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return -1
	default: // number, true, false, null
		for ; i < len(doc); i++ {
			switch doc[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
		}
		return i
	}
}
