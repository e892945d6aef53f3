package core

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateMetadata(t *testing.T) {
	many := map[string]string{}
	for i := range maxMetadataEntries + 1 {
		many["k"+strings.Repeat("x", i%10)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	big := map[string]string{}
	for i := range 40 {
		big["key-"+string(rune('a'+i%26))+string(rune('a'+i/26))] = strings.Repeat("v", maxMetadataValueLen)
	}
	for _, c := range []struct {
		name string
		md   map[string]string
		want string // substring of the error; "" = valid
	}{
		{"nil", nil, ""},
		{"ordinary", map[string]string{"project": "alpha", "session.id": "s-1", "team/owner:x": "ünïcødé ✓", "empty": ""}, ""},
		{"empty key", map[string]string{"": "v"}, "empty key"},
		{"key too long", map[string]string{strings.Repeat("k", 65): "v"}, "65 characters"},
		{"key charset", map[string]string{"with space": "v"}, `"with space" may contain only`},
		{"value too long", map[string]string{"big": strings.Repeat("v", 513)}, "key big is 513 bytes"},
		{"value not UTF-8", map[string]string{"bin": "\xff\xfe"}, "key bin is not valid UTF-8"},
		{"too many", many, "65 entries"},
		{"too large", big, "the limit is 16384"},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := validateMetadata(c.md)
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("validateMetadata: %v; want valid", err)
			case c.want != "" && (err == nil || !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("validateMetadata: %v; want InvalidArgument containing %q", err, c.want)
			}
		})
	}
}
