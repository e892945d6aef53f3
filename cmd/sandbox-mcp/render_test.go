package main

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// A long output is cut in the middle: the head and the tail stay, the
// notice names the command and the offset to read on from, and the text
// stays under the cap.
func TestResultCutsLongOutput(t *testing.T) {
	col := &collector{commandID: "mcp-1"}
	col.add(client.Event{Kind: client.KindStdout, Text: "START" + strings.Repeat("é", 100_000) + "END\n"})
	col.add(client.Event{Kind: client.KindResult, Data: map[string]string{"text/plain": "42"}})
	col.add(client.Event{Kind: client.KindDone, Done: &client.Done{Status: client.StatusOK, Duration: time.Second}})
	var out runOut
	res := col.result(&out, 0)
	text := res.Content[0].(*mcp.TextContent).Text
	if len(text) > maxText || !strings.HasPrefix(text, "command_id: mcp-1\nstatus: ok") ||
		!strings.Contains(text, "START") || !strings.Contains(text, "END") || !strings.Contains(text, "result: 42") ||
		!strings.Contains(text, `resume_command with command_id "mcp-1" and output_offset`) {
		t.Fatalf("cut output (%d bytes): %.200s ... %s", len(text), text, text[len(text)-300:])
	}
	if !out.OutputCut || out.OutputBytes != 200_009 || res.IsError {
		t.Errorf("out %+v, isError %v", out, res.IsError)
	}
	if strings.ContainsRune(text, '\uFFFD') {
		t.Error("a cut split a UTF-8 sequence")
	}
	// From an offset near the end: uncut.
	res = col.result(&out, 200_000)
	if text := res.Content[0].(*mcp.TextContent).Text; !strings.Contains(text, "output from byte 200000 of 200009") || !strings.Contains(text, "éEND") {
		t.Errorf("from an offset: %s", text)
	}
}

// Figures become images; a failed command and an unknown outcome are
// errors that still carry the command ID.
func TestResultImagesAndErrors(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake")
	col := &collector{commandID: "mcp-2"}
	col.add(client.Event{Kind: client.KindDisplay, Data: map[string]string{"image/png": base64.StdEncoding.EncodeToString(png), "text/plain": "<Figure>"}})
	col.add(client.Event{Kind: client.KindError, Error: &client.ExecError{Name: "ValueError", Value: "bad", Traceback: []string{"Traceback ...", "ValueError: bad"}}})
	col.add(client.Event{Kind: client.KindDone, Done: &client.Done{Status: client.StatusError}})
	res := col.result(&runOut{}, 0)
	if !res.IsError || len(res.Content) != 2 {
		t.Fatalf("isError %v, %d contents", res.IsError, len(res.Content))
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || string(img.Data) != string(png) {
		t.Errorf("image content %#v", res.Content[1])
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if !strings.Contains(text, "ValueError: bad") || strings.Contains(text, "<Figure>") {
		t.Errorf("text: %s", text)
	}

	col = &collector{commandID: "mcp-3", err: context.DeadlineExceeded}
	var out runOut
	res = col.result(&out, 0)
	if text := res.Content[0].(*mcp.TextContent).Text; !res.IsError || out.Status != "unknown" || !strings.Contains(text, "resume_command with command_id mcp-3") {
		t.Errorf("unknown outcome: %v %s", res.IsError, text)
	}
}

// With sandboxd down, a tool call is a tool error that says where it
// looked, not a protocol error.
func TestSandboxdDown(t *testing.T) {
	c, err := client.Dial("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	svc := &service{sandboxd: c, addr: "127.0.0.1:1", user: "u", timeout: time.Minute, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ss, err := svc.newServer().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if text := text(res); !res.IsError || !strings.Contains(text, "is sandboxd running at 127.0.0.1:1") {
		t.Errorf("isError %v: %s", res.IsError, text)
	}
}

func TestFlags(t *testing.T) {
	env := map[string]string{"SANDBOX_MCP_SANDBOXD": "10.0.0.1:1", "SANDBOX_MCP_TOKEN": "secret"}
	cfg, err := parseFlags([]string{"--user", "bob"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.sandboxd != "10.0.0.1:1" || cfg.token != "secret" || cfg.user != "bob" || cfg.timeout != 5*time.Minute || cfg.httpAddr != "" {
		t.Errorf("%+v", cfg)
	}
	cfg, err = parseFlags(nil, func(string) string { return "" }, io.Discard)
	if err != nil || cfg.sandboxd != "127.0.0.1:50051" || cfg.user != "mcp" {
		t.Errorf("defaults: %+v, %v", cfg, err)
	}
	if _, err := parseFlags([]string{"--timeout", "-1s"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Error("a negative --timeout was accepted")
	}
}
