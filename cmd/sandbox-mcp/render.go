package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// collector gathers one command's events as they arrive: the output as a
// terminal shows it (stdout and stderr interleaved), the displays and
// results, the exceptions, and how it ended. The stream's goroutine adds to
// it while the progress loop reads it.
type collector struct {
	sandboxID, commandID string

	mu      sync.Mutex
	output  strings.Builder
	outputs []client.Output
	errs    []*client.ExecError
	fin     *client.Done
	// err is why following the command failed; set before the stream's
	// goroutine ends, read after.
	err error
}

func (c *collector) add(ev client.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev.Kind {
	case client.KindStdout, client.KindStderr:
		c.output.WriteString(ev.Text)
	case client.KindDisplay, client.KindResult:
		c.outputs = append(c.outputs, client.Output{Result: ev.Kind == client.KindResult, Data: ev.Data})
	case client.KindError:
		c.errs = append(c.errs, ev.Error)
	case client.KindDone:
		c.fin = ev.Done
	}
}

func (c *collector) done() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fin != nil
}

// progressMessage is a one-line summary of a running command.
func (c *collector) progressMessage(elapsed time.Duration) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.output.String()
	msg := fmt.Sprintf("command %s running for %s, %d bytes of output", c.commandID, elapsed.Round(time.Second), len(out))
	out = strings.TrimRight(out, "\n")
	if i := strings.LastIndexByte(out, '\n'); i >= 0 {
		out = out[i+1:]
	}
	if out != "" {
		msg += ": " + clip(out, 200)
	}
	return msg
}

// result renders the command for the model, showing the output from
// offset on, and fills out's status and figures.
func (c *collector) result(out *runOut, offset int) *mcp.CallToolResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	output := c.output.String()
	out.OutputBytes = len(output)
	out.Status = string(client.StatusUnknown)
	res := &mcp.CallToolResult{}
	var head strings.Builder
	head.WriteString(stateNote(out))
	fmt.Fprintf(&head, "command_id: %s\n", c.commandID)
	if d := c.fin; d != nil {
		out.Status, out.ExitCode = string(d.Status), d.ExitCode
		for _, f := range d.Files {
			out.Files = append(out.Files, f.Path)
		}
		fmt.Fprintf(&head, "status: %s", d.Status)
		if d.ExitCode != nil {
			fmt.Fprintf(&head, " (exit code %d)", *d.ExitCode)
		}
		fmt.Fprintf(&head, " in %s\n", d.Duration.Round(time.Millisecond))
		if d.Reason != "" {
			fmt.Fprintf(&head, "reason: %s\n", d.Reason)
		}
		if d.StateLost {
			out.StateLost = true
			head.WriteString("NOTE: state_lost: the Python interpreter was restarted; variables from earlier calls are gone (files under /workspace remain).\n")
		}
		if d.OutputTruncated {
			head.WriteString("NOTE: sandboxd stopped storing this command's output at its cap; the end of the output is lost (the command ran to its end).\n")
		}
		if len(out.Files) > 0 {
			fmt.Fprintf(&head, "files changed: %s\n", clip(strings.Join(out.Files, ", "), 2000))
		}
		res.IsError = d.Status != client.StatusOK
	} else {
		res.IsError = true
		fmt.Fprintf(&head, "status: %s: the command's outcome is not known", out.Status)
		if c.err != nil {
			fmt.Fprintf(&head, ": %v", c.err)
		}
		if errors.Is(c.err, client.ErrGone) {
			out.StateLost = true
			head.WriteString("\nNOTE: state_lost: the sandbox is gone with its variables and files; the next call gets a new one")
		} else if !errors.Is(c.err, client.ErrNotFound) && !errors.Is(c.err, client.ErrCommandLost) {
			fmt.Fprintf(&head, "\ncall resume_command with command_id %s to wait for it", c.commandID)
		}
		head.WriteString("\n")
	}

	// The output, from offset, cut in the middle when too long.
	if offset > len(output) {
		offset = len(output)
	}
	shown := output[offset:]
	if offset > 0 {
		fmt.Fprintf(&head, "output from byte %d of %d:\n", offset, len(output))
	}
	if len(shown) > headBytes+tailBytes {
		h := cutAt(shown, headBytes)
		t := shown[len(shown)-tailBytes:]
		for len(t) > 0 && !utf8.RuneStart(t[0]) {
			t = t[1:]
		}
		omittedFrom := offset + len(h)
		omittedTo := len(output) - len(t)
		out.OutputCut = true
		shown = h + fmt.Sprintf("\n[... output bytes %d-%d of %d cut: call resume_command with command_id %q and output_offset %d to read on, "+
			"or have the code write large output to a file and read it with read_file ...]\n", omittedFrom, omittedTo, len(output), c.commandID, omittedFrom) + t
	}
	text := head.String() + strings.ToValidUTF8(shown, "\uFFFD")
	if shown != "" && !strings.HasSuffix(shown, "\n") {
		text += "\n"
	}

	images := 0
	for _, o := range c.outputs {
		if img, mt := imageOf(o.Data); img != nil && images < maxImages {
			images++
			res.Content = append(res.Content, &mcp.ImageContent{Data: img, MIMEType: mt})
			continue
		} else if mt != "" {
			text += fmt.Sprintf("[%s image not returned: over %d images or %d bytes]\n", mt, maxImages, maxImage)
		}
		if t, ok := o.Data["text/plain"]; ok {
			if o.Result {
				text += "result: "
			}
			text += clip(t, maxPart) + "\n"
		}
	}
	for _, e := range c.errs {
		text += clip(e.String(), maxPart)
	}
	if len(text) > maxText {
		text = cutAt(text, maxText) + "\n[... cut]\n"
	}
	res.Content = append([]mcp.Content{&mcp.TextContent{Text: text}}, res.Content...)
	return res
}

// imageOf decodes the first image of a MIME bundle; nil and the type when
// it is too large or not valid base64.
func imageOf(data map[string]string) ([]byte, string) {
	for _, mt := range imageTypes {
		b64, ok := data[mt]
		if !ok {
			continue
		}
		if base64.StdEncoding.DecodedLen(len(b64)) > maxImage+3 {
			return nil, mt
		}
		img, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
		if err != nil {
			return nil, mt
		}
		return img, mt
	}
	return nil, ""
}

// cutAt is s's first n bytes at most, ending on a rune boundary.
func cutAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// clip is s cut to n bytes with a marker.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return cutAt(s, n) + fmt.Sprintf("[... %d bytes cut]", len(s)-n)
}
