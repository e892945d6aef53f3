package e2bapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"

	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// Request bodies are JSON objects decoded as they are read, field by field
// (encoding/json's Decoder, token by token), with each field's bound
// applied while it is read: a map past its number of entries or bytes, a
// string past its length, nesting past maxJSONDepth or more than
// maxSkippedTokens in fields the door does not know end the decoding there,
// and the request is refused without reading the rest. What a body costs
// is then bounded by the fields' bounds and by its largest single token
// (a string, at most the body's own cap), not by what else the body holds:
// decoding the whole body into a struct first would build a map of every
// name an env_vars object holds, whatever its number.

// Bounds of the JSON decoding itself.
const (
	// maxJSONDepth bounds the nesting of values the door skips.
	maxJSONDepth = 32
	// maxSkippedTokens bounds the tokens of fields the door does not know
	// (the SDKs send a few, such as secure or mcp) in one body.
	maxSkippedTokens = 4096
)

// jsonBody is a request body being decoded.
type jsonBody struct {
	dec     *json.Decoder
	skipped int
}

// field decodes the value of one field, named name.
type field func(b *jsonBody, name string) error

// decodeObject decodes body, a JSON object or nothing at all (an empty
// body or null leaves everything as it was), calling fields[name] for each
// field and skipping the others. A field given twice is decoded twice (a
// map's entries then add up, under the same bounds).
func decodeObject(body io.Reader, fields map[string]field) error {
	b := &jsonBody{dec: json.NewDecoder(body)}
	b.dec.UseNumber()
	tok, err := b.dec.Token()
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return bodyError(err)
	case tok == nil:
		return drain(body)
	case tok != json.Delim('{'):
		return badRequest("the request body is not a JSON object")
	}
	for b.dec.More() {
		tok, err := b.dec.Token()
		if err != nil {
			return bodyError(err)
		}
		name, _ := tok.(string)
		if f := fields[name]; f != nil {
			err = f(b, name)
		} else {
			err = b.skip()
		}
		if err != nil {
			return err
		}
	}
	if _, err := b.dec.Token(); err != nil { // the closing brace
		return bodyError(err)
	}
	return drain(body)
}

// drain reads what follows the object to the body's end (ignored, as
// encoding/json ignores it; the body's cap bounds it): only there is the
// body's place among the bodies being read given back and its deadline
// lifted, and only then does net/http watch the connection for the client
// leaving.
func drain(body io.Reader) error {
	if _, err := io.Copy(io.Discard, body); err != nil {
		return bodyError(err)
	}
	return nil
}

// token reads the next token.
func (b *jsonBody) token() (json.Token, error) {
	tok, err := b.dec.Token()
	if err != nil {
		return nil, bodyError(err)
	}
	return tok, nil
}

// skip reads past one value the door does not use.
func (b *jsonBody) skip() error {
	depth := 0
	for {
		tok, err := b.token()
		if err != nil {
			return err
		}
		if b.skipped++; b.skipped > maxSkippedTokens {
			return badRequest(fmt.Sprintf("the request body holds more than %d values in fields this server does not use", maxSkippedTokens))
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if depth++; depth > maxJSONDepth {
				return badRequest(fmt.Sprintf("the request body is nested deeper than %d levels", maxJSONDepth))
			}
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// bodyError is the caller's error for a failure to read or parse the body.
func bodyError(err error) error {
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &mbe):
		return tooLarge(mbe.Limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return &apiError{status: http.StatusRequestTimeout, msg: "the request body did not arrive in time"}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("the request body is not valid JSON: it ends too soon")
	case errors.As(err, &se):
		return badRequest("the request body is not valid JSON: " + err.Error())
	}
	return badRequest("reading the request body: " + err.Error())
}

// typeError says a field's value is not of the type it must be.
func typeError(name, want string, tok json.Token) error {
	got := "a value"
	switch tok.(type) {
	case string:
		got = "a string"
	case json.Number:
		got = "a number"
	case bool:
		got = "a boolean"
	case json.Delim:
		if tok == json.Delim('{') {
			got = "an object"
		} else {
			got = "an array"
		}
	}
	return badRequest(fmt.Sprintf("%s must be %s, not %s", name, want, got))
}

// stringField decodes a string of at most max bytes (null leaves dst).
func stringField(dst *string, max int) field {
	return func(b *jsonBody, name string) error {
		tok, err := b.token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case nil:
			return nil
		case string:
			if len(v) > max {
				return badRequest(fmt.Sprintf("%s is longer than %d bytes", name, max))
			}
			*dst = v
			return nil
		}
		return typeError(name, "a string", tok)
	}
}

// intField decodes a whole number (null leaves dst).
func intField(dst **int64) field {
	return func(b *jsonBody, name string) error {
		tok, err := b.token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case nil:
			return nil
		case json.Number:
			n, err := strconv.ParseInt(string(v), 10, 64)
			if err != nil {
				return badRequest(fmt.Sprintf("%s must be a whole number, not %.32s", name, v))
			}
			*dst = &n
			return nil
		}
		return typeError(name, "a number", tok)
	}
}

// boolField decodes a boolean (null leaves dst).
func boolField(dst **bool) field {
	return func(b *jsonBody, name string) error {
		tok, err := b.token()
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case nil:
			return nil
		case bool:
			*dst = &v
			return nil
		}
		return typeError(name, "a boolean", tok)
	}
}

// openObject reads the start of field name's value: true for an object
// (its '{' consumed), false with no error for null, else the type error
// naming what was expected.
func (b *jsonBody) openObject(name, what string) (bool, error) {
	tok, err := b.token()
	if err != nil {
		return false, err
	}
	switch tok {
	case nil:
		return false, nil
	case json.Delim('{'):
		return true, nil
	}
	return false, typeError(name, what, tok)
}

// mapField decodes an object of strings (a null value is ""; null leaves
// dst) of at most maxEntries entries and maxBytes in all (names and values,
// a byte more each, as the domain counts an environment), refusing the
// body at the first entry past either: what it holds is bounded by them
// whatever the body holds. noun names the entries in the refusal.
func mapField(dst *map[string]string, noun string, maxEntries, maxBytes int) field {
	return func(b *jsonBody, name string) error {
		if open, err := b.openObject(name, "an object"); !open {
			return err // nil for null
		}
		m := *dst
		if m == nil {
			m = map[string]string{}
			*dst = m
		}
		total := 0
		for k, v := range m {
			total += len(k) + len(v) + 1
		}
		for b.dec.More() {
			kt, err := b.token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			vt, err := b.token()
			if err != nil {
				return err
			}
			var v string
			switch x := vt.(type) {
			case nil:
			case string:
				v = x
			default:
				return typeError(fmt.Sprintf("%s[%q]", name, core.Truncate(k, 64)), "a string", vt)
			}
			old, dup := m[k]
			if !dup && len(m) >= maxEntries {
				return badRequest(fmt.Sprintf("%s has more than %d %s; the limit is %d", name, maxEntries, noun, maxEntries))
			}
			if dup {
				total -= len(k) + len(old) + 1
			}
			if total += len(k) + len(v) + 1; total > maxBytes {
				return badRequest(fmt.Sprintf("%s is more than %d bytes long; the limit is %d", name, maxBytes, maxBytes))
			}
			m[k] = v
		}
		_, err := b.token() // the closing brace
		return err
	}
}

// objectField decodes an object (null leaves everything as it was),
// calling fields[name] for each field and skipping the others, as
// decodeObject does for a whole body. present, when not nil, is set when
// the value was an object rather than null.
func objectField(present *bool, fields map[string]field) field {
	return func(b *jsonBody, name string) error {
		if open, err := b.openObject(name, "an object"); !open {
			return err // nil for null
		}
		if present != nil {
			*present = true
		}
		for b.dec.More() {
			kt, err := b.token()
			if err != nil {
				return err
			}
			k, _ := kt.(string)
			if f := fields[k]; f != nil {
				err = f(b, name+"."+k)
			} else {
				err = b.skip()
			}
			if err != nil {
				return err
			}
		}
		_, err := b.token() // the closing brace
		return err
	}
}

// arrayField decodes an array (null leaves everything as it was) of at
// most maxEntries values, calling elem for each with the value's name
// ("name[3]"), refusing the body at the first value past the bound.
func arrayField(maxEntries int, elem func(i int) field) field {
	return func(b *jsonBody, name string) error {
		tok, err := b.token()
		if err != nil {
			return err
		}
		switch tok {
		case nil:
			return nil
		case json.Delim('['):
		default:
			return typeError(name, "an array", tok)
		}
		for i := 0; b.dec.More(); i++ {
			if i >= maxEntries {
				return badRequest(fmt.Sprintf("%s has more than %d entries; the limit is %d", name, maxEntries, maxEntries))
			}
			if err := elem(i)(b, fmt.Sprintf("%s[%d]", name, i)); err != nil {
				return err
			}
		}
		_, err = b.token() // the closing bracket
		return err
	}
}

// stringListField decodes an array of at most maxEntries strings of at
// most maxLen bytes each (null leaves dst; a null entry is refused).
func stringListField(dst *[]string, maxEntries, maxLen int) field {
	return func(b *jsonBody, name string) error {
		tok, err := b.token()
		if err != nil {
			return err
		}
		switch tok {
		case nil:
			return nil
		case json.Delim('['):
		default:
			return typeError(name, "an array of strings", tok)
		}
		list := []string{}
		for i := 0; b.dec.More(); i++ {
			if i >= maxEntries {
				return badRequest(fmt.Sprintf("%s has more than %d entries; the limit is %d", name, maxEntries, maxEntries))
			}
			tok, err := b.token()
			if err != nil {
				return err
			}
			s, ok := tok.(string)
			switch {
			case !ok:
				return typeError(fmt.Sprintf("%s[%d]", name, i), "a string", tok)
			case len(s) > maxLen:
				return badRequest(fmt.Sprintf("%s[%d] is longer than %d bytes", name, i, maxLen))
			}
			list = append(list, s)
		}
		if _, err := b.token(); err != nil { // the closing bracket
			return err
		}
		*dst = list
		return nil
	}
}
