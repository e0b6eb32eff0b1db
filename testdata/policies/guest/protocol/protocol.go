// Package protocol holds the JSON documents a Kubewarden policy hands back to
// its host (docs/compatibility.md#validation-requests-and-responses) and the
// payload of the tracing/log host call
// (docs/compatibility.md#host-capabilities), encoded by hand so that a policy
// pays for no reflection.
//
// It is pure Go: it must not import guest/wapc, guest/wasi or anything that
// declares a //go:wasmimport, so it builds and is tested natively.
package protocol

import (
	"strconv"
	"unicode/utf8"
)

// ValidationResponse is the answer to the validate operation.
type ValidationResponse struct {
	// Accepted tells whether the request is allowed.
	Accepted bool
	// Message explains a rejection; omitted when empty.
	Message string
	// Code is the HTTP-like status code of a rejection; omitted when 0.
	Code int
	// MutatedObject is the JSON of the object to admit instead of the
	// request's; omitted when nil. It is copied verbatim and must be valid JSON.
	MutatedObject []byte
}

// Marshal returns the JSON document
// {"accepted":bool,"message"?:str,"code"?:int,"mutated_object"?:any}.
func (r ValidationResponse) Marshal() []byte {
	b := make([]byte, 0, 32+len(r.Message)+len(r.MutatedObject))
	b = append(b, `{"accepted":`...)
	b = strconv.AppendBool(b, r.Accepted)
	if r.Message != "" {
		b = append(b, `,"message":`...)
		b = AppendString(b, r.Message)
	}
	if r.Code != 0 {
		b = append(b, `,"code":`...)
		b = strconv.AppendInt(b, int64(r.Code), 10)
	}
	if r.MutatedObject != nil {
		b = append(b, `,"mutated_object":`...)
		b = append(b, r.MutatedObject...)
	}
	return append(b, '}')
}

// SettingsValidationResponse is the answer to the validate_settings
// (waPC) or validate-settings (WASI) operation.
type SettingsValidationResponse struct {
	// Valid tells whether the settings are acceptable.
	Valid bool
	// Message explains why they are not; omitted when empty.
	Message string
}

// Marshal returns the JSON document {"valid":bool,"message"?:str}.
func (r SettingsValidationResponse) Marshal() []byte {
	b := make([]byte, 0, 32+len(r.Message))
	b = append(b, `{"valid":`...)
	b = strconv.AppendBool(b, r.Valid)
	if r.Message != "" {
		b = append(b, `,"message":`...)
		b = AppendString(b, r.Message)
	}
	return append(b, '}')
}

// Accept returns the response that admits the request unchanged.
func Accept() []byte { return ValidationResponse{Accepted: true}.Marshal() }

// Reject returns the response that denies the request with message and no code.
func Reject(message string) []byte {
	return ValidationResponse{Message: message}.Marshal()
}

// Mutate returns the response that admits object (valid JSON) in place of
// the request's object.
func Mutate(object []byte) []byte {
	return ValidationResponse{Accepted: true, MutatedObject: object}.Marshal()
}

// SettingsValid returns the response that accepts the settings.
func SettingsValid() []byte { return SettingsValidationResponse{Valid: true}.Marshal() }

// SettingsInvalid returns the response that refuses the settings with message.
func SettingsInvalid(message string) []byte {
	return SettingsValidationResponse{Message: message}.Marshal()
}

// LogPayload returns the payload of the kubewarden/tracing/log host call:
// {"level":level,"message":message}.
func LogPayload(level, message string) []byte {
	b := make([]byte, 0, 32+len(level)+len(message))
	b = append(b, `{"level":`...)
	b = AppendString(b, level)
	b = append(b, `,"message":`...)
	b = AppendString(b, message)
	return append(b, '}')
}

// AppendString appends s to b as a JSON string. Invalid UTF-8 is replaced by
// U+FFFD, as encoding/json does.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
