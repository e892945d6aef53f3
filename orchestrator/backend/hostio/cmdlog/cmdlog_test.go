package cmdlog

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/orchestrator/backend/hostio/iolog"
	"github.com/sandboxd/sandboxd/orchestrator/core"
)

// ParsePage is ListCommands' one rule for both backends: the size
// defaulted and bounded, the token a log position this server made, each
// refusal INVALID_ARGUMENT naming the field.
func TestParsePage(t *testing.T) {
	for _, tc := range []struct {
		size  int
		token string
		want  Page
	}{
		{0, "", Page{Size: core.DefaultCommandPage}},
		{1, "", Page{Size: 1}},
		{core.MaxCommandPage, "7", Page{Size: core.MaxCommandPage, Before: 7}},
		{3, Token(iolog.MaxLogRecords), Page{Size: 3, Before: iolog.MaxLogRecords}},
	} {
		if got, err := ParsePage(tc.size, tc.token); err != nil || got != tc.want {
			t.Errorf("ParsePage(%d, %q) = %+v, %v; want %+v", tc.size, tc.token, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		size  int
		token string
		field string
	}{
		{-1, "", "page_size -1 is outside 0-200"},
		{core.MaxCommandPage + 1, "", "page_size 201"},
		{0, "abc", `page_token "abc" is not one this server made`},
		{0, "0", "page_token"},
		{0, "-3", "page_token"},
		{0, Token(iolog.MaxLogRecords + 1), "page_token"},
		{0, strings.Repeat("9", 100), "page_token"},
	} {
		_, err := ParsePage(tc.size, tc.token)
		if !errors.Is(err, core.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("ParsePage(%d, %q) = %v; want INVALID_ARGUMENT mentioning %q", tc.size, tc.token, err, tc.field)
		}
		if len(err.Error()) > 200 {
			t.Errorf("ParsePage(%d, %q): a message of %d bytes; the token is truncated", tc.size, tc.token, len(err.Error()))
		}
	}
}
