package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/google/uuid"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
)

// service holds what the tools share: the connection to sandboxd and the
// user model.
type service struct {
	sandboxd *client.Client
	// addr is sandboxd's address, for messages.
	addr string
	// user is the sandboxd user whose sandbox the tools use.
	user string
	// userHeader, when set, is an HTTP request header that picks the user.
	userHeader string
	// timeout is a command's limit when the call gives none.
	timeout time.Duration
	log     *slog.Logger
	// progressEvery is the least time between progress notifications.
	progressEvery time.Duration
}

// maxTimeoutSeconds is the largest timeout_seconds accepted: sandboxd's
// default --max-timeout (it refuses more, unless configured otherwise).
const maxTimeoutSeconds = 3600

// The tools' inputs. The jsonschema tags are the descriptions the model sees.
type (
	runCodeIn struct {
		Language       string `json:"language" jsonschema:"python (a persistent interpreter: variables, imports and definitions survive across calls), bash (a fresh bash process per call), javascript or typescript (one persistent Node.js interpreter shared by both: top-level await, import), or r (a persistent R session); javascript, typescript and r only where the sandbox image has them"`
		Code           string `json:"code" jsonschema:"the source to run"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds (default: the server's --timeout); the command ends with status timeout when it is reached"`
	}
	runOnceIn struct {
		Language       string `json:"language" jsonschema:"python, bash, javascript, typescript, r or java (javascript, typescript, r and java only where the sandbox image has them)"`
		Code           string `json:"code" jsonschema:"the source to run"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds (default: the server's --timeout)"`
	}
	runBashIn struct {
		Command        string `json:"command" jsonschema:"the bash command or script to run (working directory /workspace)"`
		TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"wall-clock limit in seconds (default: the server's --timeout)"`
	}
	resumeIn struct {
		CommandID    string `json:"command_id" jsonschema:"the command_id printed by run_code or run_bash"`
		OutputOffset int    `json:"output_offset,omitempty" jsonschema:"show the output from this byte offset on (as given in a notice about cut output); default 0"`
	}
	readFileIn struct {
		Path   string `json:"path" jsonschema:"file path relative to /workspace (or absolute under /workspace)"`
		Offset int64  `json:"offset,omitempty" jsonschema:"byte offset to start reading at, for reading a large text file in pieces; default 0"`
	}
	writeFileIn struct {
		Path     string `json:"path" jsonschema:"file path relative to /workspace (or absolute under /workspace); missing directories are created and an existing file is replaced"`
		Content  string `json:"content" jsonschema:"the file's content"`
		Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64 for binary content"`
	}
	listFilesIn struct {
		Path string `json:"path,omitempty" jsonschema:"directory relative to /workspace; default /workspace itself"`
	}
)

// runOut is the structured result of the command tools.
type runOut struct {
	CommandID         string   `json:"command_id" jsonschema:"the command's ID, for resume_command"`
	Status            string   `json:"status" jsonschema:"ok, error, timeout, interrupted, killed, or unknown when the call ended before the command did"`
	ExitCode          *int32   `json:"exit_code,omitempty" jsonschema:"bash's exit status"`
	SandboxID         string   `json:"sandbox_id"`
	StateLost         bool     `json:"state_lost,omitempty" jsonschema:"true when variables or files from earlier calls are gone"`
	ReplacedSandboxID string   `json:"replaced_sandbox_id,omitempty" jsonschema:"the sandbox that died and was replaced, losing its state"`
	OutputBytes       int      `json:"output_bytes" jsonschema:"size of the command's whole stdout and stderr"`
	OutputCut         bool     `json:"output_cut,omitempty" jsonschema:"true when the text shown leaves part of the output out (see the notice)"`
	Files             []string `json:"files,omitempty" jsonschema:"files under /workspace the command created or changed"`
}

func (s *service) newServer() *mcp.Server {
	server := mcp.NewServer(&mcp.Implementation{Name: "sandbox-mcp", Title: "sandboxd code sandbox", Version: version}, &mcp.ServerOptions{
		Instructions: "Runs Python, bash, JavaScript/TypeScript and R in an isolated Linux sandbox (no network unless configured). " +
			"Python state persists across run_code calls; files under /workspace persist across all calls. " +
			"Every command result carries a command_id; use resume_command with it when a result was cut off or a call was interrupted.",
		Logger: s.log,
	})
	f, t := false, true
	mcp.AddTool(server, &mcp.Tool{
		Name:  "run_code",
		Title: "Run code in the sandbox",
		Description: "Run Python, bash, JavaScript, TypeScript or R in the user's sandbox and wait for it to finish. " +
			"Python runs in one persistent interpreter: variables, imports and functions defined in earlier run_code calls are still there " +
			"(unless the result says state_lost). The value of the last expression is returned like in a notebook; " +
			"matplotlib figures (plt.show() or a figure as last expression) come back as PNG images. " +
			"bash runs in a fresh process each call, in /workspace. " +
			"JavaScript and TypeScript share one persistent Node.js interpreter (top-level await, import statements), R one persistent session; " +
			"each returns its last expression's value like Python. " +
			"Returns: a header line with command_id and status (ok, error, timeout, interrupted, killed), then stdout and stderr " +
			"(interleaved as printed), the result, and any exception's traceback. Text beyond about 100 KB is cut (head and tail kept) " +
			"with a notice: read the rest with resume_command, or write large output to a file and use read_file. " +
			"The sandbox has no network access unless its operator gave it some (then only where its policy allows); files persist under /workspace. " +
			"Cancelling the call interrupts the command (Python keeps its variables).",
		InputSchema: runCodeSchema(),
		Annotations: &mcp.ToolAnnotations{Title: "Run code", DestructiveHint: &t, OpenWorldHint: &f},
	}, s.runCode)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "run_bash",
		Title: "Run a bash command in the sandbox",
		Description: "Run a bash command or script in the user's sandbox (working directory /workspace) and wait for it. " +
			"Each call is a fresh bash process: files persist, but shell variables and cd do not (use run_code with python for state). " +
			"Returns a header line with command_id, status and exit code, then stdout and stderr interleaved; " +
			"text beyond about 100 KB is cut with a notice (use resume_command with output_offset, or redirect output to a file).",
		Annotations: &mcp.ToolAnnotations{Title: "Run bash", DestructiveHint: &t, OpenWorldHint: &f},
	}, s.runBash)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "run_once",
		Title: "Run code once in a fresh sandbox",
		Description: "Run Python, bash, JavaScript, TypeScript or R once in a fresh sandbox of its own, which is deleted when the code ends: " +
			"nothing persists (no variables, no files) and the user's own sandbox is untouched. For one-off, isolated computations; " +
			"use run_code to build on earlier work. Returns what run_code returns; resume_command cannot follow it (its sandbox is gone).",
		InputSchema: runOnceSchema(),
		Annotations: &mcp.ToolAnnotations{Title: "Run once", DestructiveHint: &f, OpenWorldHint: &f},
	}, s.runOnce)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "resume_command",
		Title: "Resume a command's output",
		Description: "Get the output and outcome of a command started earlier by run_code or run_bash, by its command_id: " +
			"waits for it to finish if it still runs (e.g. the earlier call was interrupted or timed out on the client side), " +
			"and returns its output from output_offset on (to read output that a result cut off). Never runs the command again. " +
			"Fails when the command is unknown, e.g. its sandbox was replaced. Cancelling the call interrupts the command.",
		Annotations: &mcp.ToolAnnotations{Title: "Resume command", ReadOnlyHint: true, OpenWorldHint: &f},
	}, s.resumeCommand)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "read_file",
		Title: "Read a file from /workspace",
		Description: "Read a file under /workspace in the user's sandbox. Text comes back as text (up to about 100 KB per call; " +
			"a notice gives the offset to continue from), PNG, JPEG, GIF and WebP images as images; " +
			"other binary files are described, not returned (inspect them with run_code).",
		Annotations: &mcp.ToolAnnotations{Title: "Read file", ReadOnlyHint: true, OpenWorldHint: &f},
	}, s.readFile)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "write_file",
		Title: "Write a file to /workspace",
		Description: "Create or replace a file under /workspace in the user's sandbox, creating missing directories. " +
			"Code run later sees it (e.g. open('data.csv') in Python, or cat data.csv in bash). Returns the stored path and size.",
		InputSchema: writeFileSchema(),
		Annotations: &mcp.ToolAnnotations{Title: "Write file", DestructiveHint: &t, IdempotentHint: true, OpenWorldHint: &f},
	}, s.writeFile)
	mcp.AddTool(server, &mcp.Tool{
		Name:  "list_files",
		Title: "List files in /workspace",
		Description: "List one directory under /workspace in the user's sandbox (not recursive): one line per entry, " +
			"directories ending in /, files with their size in bytes.",
		Annotations: &mcp.ToolAnnotations{Title: "List files", ReadOnlyHint: true, OpenWorldHint: &f},
	}, s.listFiles)
	return server
}

// runCodeSchema is runCodeIn's schema with the languages as an enum.
func runCodeSchema() *jsonschema.Schema { return languageSchema[runCodeIn]() }

// runOnceSchema is runOnceIn's schema with the languages as an enum.
func runOnceSchema() *jsonschema.Schema { return languageSchema[runOnceIn]() }

// languageSchema is T's schema, T a tool's input with a language and a
// timeout_seconds: the languages as an enum, the timeout bounded.
func languageSchema[T any]() *jsonschema.Schema {
	sch, err := jsonschema.For[T](nil)
	if err != nil {
		panic(err)
	}
	sch.Properties["language"].Enum = []any{"python", "bash", "javascript", "typescript", "r", "java"}
	sch.Properties["timeout_seconds"].Minimum = ptr(0.0)
	sch.Properties["timeout_seconds"].Maximum = ptr(float64(maxTimeoutSeconds))
	return sch
}

func writeFileSchema() *jsonschema.Schema {
	sch, err := jsonschema.For[writeFileIn](nil)
	if err != nil {
		panic(err)
	}
	sch.Properties["encoding"].Enum = []any{"utf-8", "base64"}
	return sch
}

func ptr[T any](v T) *T { return &v }

// userOf is the sandboxd user a call works for.
func (s *service) userOf(req *mcp.CallToolRequest) string {
	if s.userHeader != "" && req.Extra != nil && req.Extra.Header != nil {
		if u := strings.TrimSpace(req.Extra.Header.Get(s.userHeader)); u != "" {
			return u
		}
	}
	return s.user
}

// sandbox acquires the user's sandbox (sandboxd keeps one per user, so
// this finds the one earlier calls used) and notes a replacement in out.
func (s *service) sandbox(ctx context.Context, req *mcp.CallToolRequest, out *runOut) (string, error) {
	sb, err := s.sandboxd.Acquire(ctx, s.userOf(req))
	if errors.Is(err, client.ErrUnavailable) {
		return "", fmt.Errorf("%w (is sandboxd running at %s? set --sandboxd or SANDBOX_MCP_SANDBOXD)", err, s.addr)
	}
	if err != nil {
		return "", err
	}
	out.SandboxID = sb.ID
	if sb.StateLost {
		out.StateLost, out.ReplacedSandboxID = true, sb.ReplacedID
		s.log.Warn("sandbox replaced", "user", s.userOf(req), "old", sb.ReplacedID, "new", sb.ID, "reason", sb.ReplacedReason)
	}
	return sb.ID, nil
}

// checkLanguage refuses a language tool does not run.
func checkLanguage(tool, lang string) error {
	switch lang {
	case client.LanguagePython, client.LanguageBash, client.LanguageJavaScript, client.LanguageTypeScript, client.LanguageR, client.LanguageJava:
		return nil
	}
	return fmt.Errorf("unknown language %q: %s runs python, bash, javascript, typescript, r or java", lang, tool)
}

// runTimeout checks a run's code and timeout_seconds and returns the
// timeout to ask sandboxd for.
func (s *service) runTimeout(code string, timeoutSeconds int) (time.Duration, error) {
	if strings.TrimSpace(code) == "" {
		return 0, errors.New("the code is empty")
	}
	if timeoutSeconds < 0 || timeoutSeconds > maxTimeoutSeconds {
		return 0, fmt.Errorf("timeout_seconds %d: must be between 1 and %d (or 0 for the default)", timeoutSeconds, maxTimeoutSeconds)
	}
	if timeoutSeconds > 0 {
		return time.Duration(timeoutSeconds) * time.Second, nil
	}
	return s.timeout, nil
}

func (s *service) runCode(ctx context.Context, req *mcp.CallToolRequest, in runCodeIn) (*mcp.CallToolResult, runOut, error) {
	if err := checkLanguage("run_code", in.Language); err != nil {
		return nil, runOut{}, err
	}
	return s.execute(ctx, req, in.Language, in.Code, in.TimeoutSeconds)
}

func (s *service) runBash(ctx context.Context, req *mcp.CallToolRequest, in runBashIn) (*mcp.CallToolResult, runOut, error) {
	return s.execute(ctx, req, "bash", in.Command, in.TimeoutSeconds)
}

func (s *service) execute(ctx context.Context, req *mcp.CallToolRequest, lang, code string, timeoutSeconds int) (*mcp.CallToolResult, runOut, error) {
	timeout, err := s.runTimeout(code, timeoutSeconds)
	if err != nil {
		return nil, runOut{}, err
	}
	var out runOut
	sbID, err := s.sandbox(ctx, req, &out)
	if err != nil {
		return nil, out, err
	}
	// The ID is chosen here, so that it is known (and shown) even when the
	// call is cut off, and so that a broken stream resumes without running
	// the command twice.
	out.CommandID = "mcp-" + uuid.NewString()
	cmd := client.Command{SandboxID: sbID, ID: out.CommandID, Language: lang, Code: code, Timeout: timeout}
	s.log.Debug("running", "command", out.CommandID, "sandbox", sbID, "language", lang)
	col := s.follow(ctx, req, sbID, out.CommandID, func(fn func(client.Event)) error {
		_, err := s.sandboxd.Run(ctx, cmd, false, fn)
		return err
	})
	return col.result(&out, 0), out, nil
}

// runOnce runs code in a sandbox of its own (sandboxd's RunStateless),
// deleted when the code ends; cancelling the call deletes it with its
// command.
func (s *service) runOnce(ctx context.Context, req *mcp.CallToolRequest, in runOnceIn) (*mcp.CallToolResult, runOut, error) {
	if err := checkLanguage("run_once", in.Language); err != nil {
		return nil, runOut{}, err
	}
	timeout, err := s.runTimeout(in.Code, in.TimeoutSeconds)
	if err != nil {
		return nil, runOut{}, err
	}
	var out runOut
	var commandID string
	col := s.follow(ctx, req, "", "", func(fn func(client.Event)) error {
		_, err := s.sandboxd.RunStateless(ctx, client.Stateless{Language: in.Language, Code: in.Code, Timeout: timeout}, func(ev client.Event) {
			if commandID == "" {
				commandID = ev.CommandID
			}
			fn(ev)
		})
		if errors.Is(err, client.ErrUnavailable) {
			err = fmt.Errorf("%w (is sandboxd running at %s? set --sandboxd or SANDBOX_MCP_SANDBOXD)", err, s.addr)
		}
		return err
	})
	col.commandID, out.CommandID = commandID, commandID
	return col.result(&out, 0), out, nil
}

func (s *service) resumeCommand(ctx context.Context, req *mcp.CallToolRequest, in resumeIn) (*mcp.CallToolResult, runOut, error) {
	if in.CommandID == "" {
		return nil, runOut{}, errors.New("command_id is required")
	}
	if in.OutputOffset < 0 {
		return nil, runOut{}, fmt.Errorf("output_offset %d: must not be negative", in.OutputOffset)
	}
	var out runOut
	sbID, err := s.sandbox(ctx, req, &out)
	if err != nil {
		return nil, out, err
	}
	out.CommandID = in.CommandID
	if out.StateLost {
		return nil, out, fmt.Errorf("command %s is lost: its sandbox %s died and was replaced by %s (state_lost)", in.CommandID, out.ReplacedSandboxID, sbID)
	}
	// StreamCommand rather than Run with resume: Run sends a command that
	// sandboxd does not know, and here there is no code to send.
	col := s.follow(ctx, req, sbID, in.CommandID, func(fn func(client.Event)) error {
		st, err := s.sandboxd.StreamCommand(ctx, sbID, in.CommandID, 0)
		if err != nil {
			return err
		}
		for {
			ev, err := st.Recv()
			if errors.Is(err, io.EOF) {
				return errors.New("the command's stream ended before it was done (sandboxd restarting?); call resume_command again")
			}
			if err != nil {
				return err
			}
			fn(ev)
			if ev.Kind == client.KindDone {
				return nil
			}
		}
	})
	if errors.Is(col.err, client.ErrNotFound) {
		col.err = fmt.Errorf("no command %s in sandbox %s: it was never started there, or its output was pruned: %w", in.CommandID, sbID, col.err)
	}
	return col.result(&out, in.OutputOffset), out, nil
}

// follow runs stream (which calls its argument for each event of the
// command) while sending progress notifications and, when ctx is cancelled
// (the client cancelled the call), interrupting the command.
func (s *service) follow(ctx context.Context, req *mcp.CallToolRequest, sandboxID, commandID string, stream func(func(client.Event)) error) *collector {
	col := &collector{sandboxID: sandboxID, commandID: commandID}
	events := make(chan struct{}, 1)
	streamDone := make(chan struct{})
	started := time.Now()
	go func() {
		defer close(streamDone)
		col.err = stream(func(ev client.Event) {
			col.add(ev)
			select {
			case events <- struct{}{}:
			default:
			}
		})
	}()
	token := req.Params.GetProgressToken()
	every := s.progressEvery
	if every <= 0 {
		every = time.Second
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last time.Time
	progress := 0.0
	for {
		select {
		case <-streamDone:
			if ctx.Err() != nil {
				s.interrupt(commandID, col)
			}
			return col
		case <-events:
			// Output: report it, at most once per period.
			if token == nil || time.Since(last) < every {
				continue
			}
		case <-tick.C:
			if token == nil || time.Since(last) < every {
				continue
			}
		}
		last = time.Now()
		progress++
		msg := col.progressMessage(time.Since(started))
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: progress, Message: msg}); err != nil {
			s.log.Debug("progress notification", "command", commandID, "err", err)
		}
	}
}

// interrupt stops a command whose call was cancelled: the client no
// longer waits for it, so it should not keep running (and holding the
// Python interpreter) unseen.
func (s *service) interrupt(commandID string, col *collector) {
	if col.done() || commandID == "" {
		// Done, or a run_once, whose sandbox goes with the call.
		return
	}
	sbID := col.sandboxID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.sandboxd.Interrupt(ctx, sbID, commandID); err != nil {
		s.log.Warn("interrupting a cancelled command", "command", commandID, "err", err)
		return
	}
	s.log.Info("interrupted the command of a cancelled call", "command", commandID, "sandbox", sbID)
}

// imageTypes are the MIME types returned as MCP images.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// Caps on what one result holds, so that a command cannot flood the model's
// context.
const (
	maxText   = 100 << 10 // the text content in all
	headBytes = 60 << 10  // of the output shown when it is cut: the head
	tailBytes = 20 << 10  // and the tail
	maxPart   = 8 << 10   // a result's text/plain, a traceback
	maxImages = 8
	maxImage  = 4 << 20 // decoded bytes of one image
)

func (s *service) readFile(ctx context.Context, req *mcp.CallToolRequest, in readFileIn) (*mcp.CallToolResult, any, error) {
	if in.Path == "" {
		return nil, nil, errors.New("path is required")
	}
	if in.Offset < 0 {
		return nil, nil, fmt.Errorf("offset %d: must not be negative", in.Offset)
	}
	var out runOut
	sbID, err := s.sandbox(ctx, req, &out)
	if err != nil {
		return nil, nil, err
	}
	// The size, for the messages; ListFiles of a file lists just it.
	infos, err := s.sandboxd.ListFiles(ctx, sbID, in.Path)
	if err != nil {
		return nil, nil, err
	}
	if len(infos) != 1 || infos[0].GetIsDir() || path.Base(infos[0].GetPath()) != path.Base(in.Path) {
		return nil, nil, fmt.Errorf("%s is a directory: use list_files", in.Path)
	}
	size := infos[0].GetSize()
	var buf bytes.Buffer
	w := &limitWriter{w: &buf, skip: in.Offset, n: maxText + 1}
	if in.Offset == 0 && isImagePath(in.Path) {
		w.n = maxImage + 1
	}
	if _, err := s.sandboxd.Download(ctx, sbID, in.Path, w); err != nil && !errors.Is(err, errFull) {
		return nil, nil, err
	}
	data := buf.Bytes()
	note := stateNote(&out)
	if mt := imageType(in.Path, data); mt != "" && in.Offset == 0 {
		if len(data) > maxImage {
			return nil, nil, fmt.Errorf("%s is an image of %d bytes, above the %d bytes returned; shrink it with run_code", in.Path, size, maxImage)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: note + fmt.Sprintf("%s: %s, %d bytes", in.Path, mt, size)},
			&mcp.ImageContent{Data: data, MIMEType: mt},
		}}, nil, nil
	}
	cut := len(data) > maxText
	if cut {
		data = []byte(cutAt(string(data), maxText))
	}
	// Text is valid UTF-8 without NULs; a piece read from an offset may
	// start inside a character.
	body := data
	for i := 0; i < 3 && in.Offset > 0 && len(body) > 0 && !utf8.RuneStart(body[0]); i++ {
		body = body[1:]
	}
	if !utf8.Valid(body) || bytes.IndexByte(body, 0) >= 0 {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: note + fmt.Sprintf(
			"%s is a binary file of %d bytes; it is not returned as text. Inspect it with run_code (e.g. Python).", in.Path, size)}}}, nil, nil
	}
	text := strings.ToValidUTF8(string(data), "\uFFFD")
	if cut {
		next := in.Offset + int64(len(data))
		text += fmt.Sprintf("\n[cut: bytes %d-%d of %d shown; call read_file with offset=%d for more]", in.Offset, next, size, next)
	} else if in.Offset > 0 {
		text = fmt.Sprintf("[bytes %d-%d of %d]\n", in.Offset, size, size) + text
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: note + text}}}, nil, nil
}

func (s *service) writeFile(ctx context.Context, req *mcp.CallToolRequest, in writeFileIn) (*mcp.CallToolResult, any, error) {
	if in.Path == "" {
		return nil, nil, errors.New("path is required")
	}
	data := []byte(in.Content)
	switch in.Encoding {
	case "", "utf-8":
	case "base64":
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, nil, fmt.Errorf("content is not valid base64: %v", err)
		}
	default:
		return nil, nil, fmt.Errorf("unknown encoding %q: use utf-8 or base64", in.Encoding)
	}
	var out runOut
	sbID, err := s.sandbox(ctx, req, &out)
	if err != nil {
		return nil, nil, err
	}
	info, err := s.sandboxd.Upload(ctx, sbID, in.Path, bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: stateNote(&out) +
		fmt.Sprintf("wrote /workspace/%s (%d bytes)", info.GetPath(), info.GetSize())}}}, nil, nil
}

func (s *service) listFiles(ctx context.Context, req *mcp.CallToolRequest, in listFilesIn) (*mcp.CallToolResult, any, error) {
	var out runOut
	sbID, err := s.sandbox(ctx, req, &out)
	if err != nil {
		return nil, nil, err
	}
	infos, err := s.sandboxd.ListFiles(ctx, sbID, in.Path)
	if err != nil {
		return nil, nil, err
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].GetPath() < infos[j].GetPath() })
	var b strings.Builder
	b.WriteString(stateNote(&out))
	dir := strings.Trim(in.Path, "/")
	fmt.Fprintf(&b, "/workspace/%s: %d entries\n", dir, len(infos))
	for i, f := range infos {
		if b.Len() > maxText {
			fmt.Fprintf(&b, "[... %d more entries not shown]\n", len(infos)-i)
			break
		}
		if f.GetIsDir() {
			fmt.Fprintf(&b, "%s/\n", f.GetPath())
		} else {
			fmt.Fprintf(&b, "%s\t%d\n", f.GetPath(), f.GetSize())
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.String()}}}, nil, nil
}

// stateNote is the line that tells the model its earlier state is gone.
func stateNote(out *runOut) string {
	if !out.StateLost {
		return ""
	}
	return fmt.Sprintf("NOTE: state_lost: the previous sandbox %s died and was replaced by %s; variables and files from earlier calls are gone.\n", out.ReplacedSandboxID, out.SandboxID)
}

var errFull = errors.New("enough read")

// limitWriter passes on the bytes after the first skip, up to n of them,
// then fails with errFull, which abandons the download.
type limitWriter struct {
	w    io.Writer
	skip int64
	n    int
}

func (l *limitWriter) Write(p []byte) (int, error) {
	total := len(p)
	if l.skip > 0 {
		k := min(int64(len(p)), l.skip)
		l.skip -= k
		p = p[k:]
	}
	if len(p) > l.n {
		l.w.Write(p[:l.n])
		l.n = 0
		return total, errFull
	}
	l.n -= len(p)
	l.w.Write(p)
	return total, nil
}

func isImagePath(p string) bool {
	switch strings.ToLower(path.Ext(p)) {
	case ".png", ".jpg", ".jpeg", ".gif", ".webp":
		return true
	}
	return false
}

// imageType is the MIME type of an image file by its content, "" if it
// is not one of imageTypes.
func imageType(p string, data []byte) string {
	switch {
	case bytes.HasPrefix(data, []byte("\x89PNG\r\n\x1a\n")):
		return "image/png"
	case bytes.HasPrefix(data, []byte("\xff\xd8\xff")):
		return "image/jpeg"
	case bytes.HasPrefix(data, []byte("GIF8")):
		return "image/gif"
	case len(data) > 12 && string(data[:4]) == "RIFF" && string(data[8:12]) == "WEBP":
		return "image/webp"
	}
	return ""
}
