package chat

import (
	"github.com/charmbracelet/glamour"
)

// MarkdownRenderer returns a renderer of the model's Markdown for a
// terminal (tables, emphasis, lists, highlighted code) wrapped at width
// columns, with glamour. style is a glamour style ("dark", "light",
// "notty", ...; "auto" asks the terminal). A text that fails to render is
// shown as it is.
func MarkdownRenderer(style string, width int) (func(string) string, error) {
	styleOpt := glamour.WithStandardStyle(style)
	if style == "auto" {
		styleOpt = glamour.WithAutoStyle()
	}
	r, err := glamour.NewTermRenderer(styleOpt, glamour.WithWordWrap(width))
	if err != nil {
		return nil, err
	}
	return func(md string) string {
		out, err := r.Render(md)
		if err != nil {
			return md
		}
		return out
	}, nil
}
