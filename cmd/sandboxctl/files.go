package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdLs lists a directory of a sandbox's /workspace, one entry a line:
// mode, uid:gid, size, modification time, path.
func cmdLs(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	depth := fs.Int("depth", 1, "levels to list (1-10)")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "ls", err)
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usageErr(c.stderr, "ls", fmt.Errorf("want SANDBOX_ID [PATH], got %d arguments", len(pos)))
	}
	path := ""
	if len(pos) == 2 {
		path = pos[1]
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	files, err := c.sandboxd.ListFiles(rctx, pos[0], path, client.WithDepth(*depth))
	if err != nil {
		return c.fail("ls "+displayArg(path), err)
	}
	if format == "json" {
		if err := writeJSONList(c.stdout, files); err != nil {
			return c.fail("ls", err)
		}
		return exitOK
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, f := range files {
		fmt.Fprintf(tw, "%s\t%d:%d\t%d\t%s\t%s\n", modeString(f), f.GetUid(), f.GetGid(), f.GetSize(), formatTime(f.GetModTime()), termsafe.Field(f.GetPath()))
	}
	if err := tw.Flush(); err != nil {
		return c.fail("ls", err)
	}
	return exitOK
}

// modeString shows a FileInfo's type and permissions as ls -l does.
func modeString(f *sandboxv1.FileInfo) string {
	m := fs.FileMode(f.GetMode() & 0o777)
	if f.GetMode()&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if f.GetMode()&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if f.GetMode()&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch f.GetType() {
	case sandboxv1.FileType_FILE_TYPE_DIRECTORY:
		m |= fs.ModeDir
	case sandboxv1.FileType_FILE_TYPE_SYMLINK:
		m |= fs.ModeSymlink
	case sandboxv1.FileType_FILE_TYPE_OTHER:
		m |= fs.ModeIrregular
	}
	return m.String()
}

// cmdMkdir creates a directory in a sandbox's /workspace.
func cmdMkdir(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("mkdir", flag.ContinueOnError)
	parents := fs.Bool("p", false, "create missing parents; an existing directory is fine")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "mkdir", err)
	}
	if len(pos) != 2 {
		return usageErr(c.stderr, "mkdir", fmt.Errorf("want SANDBOX_ID PATH, got %d arguments", len(pos)))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	if _, err := c.sandboxd.MakeDirectory(rctx, pos[0], pos[1], *parents); err != nil {
		return c.fail("mkdir "+pos[1], err)
	}
	return exitOK
}

// cmdRm removes a file or directory from a sandbox's /workspace.
func cmdRm(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("rm", flag.ContinueOnError)
	recursive := fs.Bool("r", false, "remove a directory with its content")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "rm", err)
	}
	if len(pos) != 2 {
		return usageErr(c.stderr, "rm", fmt.Errorf("want SANDBOX_ID PATH, got %d arguments", len(pos)))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	if err := c.sandboxd.Remove(rctx, pos[0], pos[1], *recursive); err != nil {
		return c.fail("rm "+pos[1], err)
	}
	return exitOK
}

// cmdMv renames a file or directory in a sandbox's /workspace.
func cmdMv(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("mv", flag.ContinueOnError)
	force := fs.Bool("f", false, "replace an existing destination")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "mv", err)
	}
	if len(pos) != 3 {
		return usageErr(c.stderr, "mv", fmt.Errorf("want SANDBOX_ID FROM TO, got %d arguments", len(pos)))
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	if _, err := c.sandboxd.Rename(rctx, pos[0], pos[1], pos[2], *force); err != nil {
		return c.fail("mv "+pos[1], err)
	}
	return exitOK
}

func displayArg(p string) string {
	if p == "" {
		return "/workspace"
	}
	return p
}

// cmdCp copies one file between the local machine and a sandbox's
// /workspace, in either direction; the side written as SANDBOX_ID:PATH is
// the sandbox's. A download goes to a temporary file renamed into place
// once complete, so a failed copy leaves no partial file.
func cmdCp(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("cp", flag.ContinueOnError)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, "cp", err)
	}
	if len(pos) != 2 {
		return usageErr(c.stderr, "cp", fmt.Errorf("want SOURCE and DESTINATION (one of them SANDBOX_ID:PATH), got %d arguments", len(pos)))
	}
	srcSB, srcPath, srcRemote := remoteSpec(pos[0])
	dstSB, dstPath, dstRemote := remoteSpec(pos[1])
	switch {
	case srcRemote && dstRemote:
		return usageErr(c.stderr, "cp", errors.New("both sides are in a sandbox; copy through a local file, or use mv within one sandbox"))
	case !srcRemote && !dstRemote:
		return usageErr(c.stderr, "cp", errors.New("neither side is in a sandbox; write one as SANDBOX_ID:PATH"))
	case srcRemote:
		return c.download(ctx, srcSB, srcPath, pos[1])
	default:
		return c.upload(ctx, pos[0], dstSB, dstPath)
	}
}

// remoteSpec splits "SANDBOX_ID:PATH"; a local path has no colon before its
// first slash.
func remoteSpec(s string) (sandboxID, path string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func (c *cli) download(ctx context.Context, sandboxID, path, local string) int {
	return c.downloadTo("cp", sandboxID, path, displayArg(path), local, func(w io.Writer) (*sandboxv1.FileInfo, error) {
		return c.sandboxd.Download(ctx, sandboxID, path, w)
	})
}

// downloadTo writes what fetch downloads from remote:path (shown as
// shown) to local ("-": stdout) for command cmd, through a temporary file
// renamed into place once complete.
func (c *cli) downloadTo(cmd, remote, path, shown, local string, fetch func(io.Writer) (*sandboxv1.FileInfo, error)) int {
	what := cmd + " " + remote + ":" + shown
	if local == "-" {
		if _, err := fetch(c.stdout); err != nil {
			return c.fail(what, err)
		}
		return exitOK
	}
	if st, err := os.Stat(local); (err == nil && st.IsDir()) || strings.HasSuffix(local, string(os.PathSeparator)) {
		local = filepath.Join(local, filepath.Base(filepath.FromSlash(path)))
	}
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".part-*")
	if err != nil {
		return c.fail(what, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing to remove
	info, err := fetch(tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return c.fail(what, err)
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return c.fail(what, err)
	}
	fmt.Fprintf(c.stderr, "copied %s:%s to %s (%d bytes)\n", remote, termsafe.Field(info.GetPath()), local, info.GetSize())
	return exitOK
}

func (c *cli) upload(ctx context.Context, local, sandboxID, path string) int {
	return c.uploadFrom("cp", "SANDBOX_ID:PATH", local, sandboxID, path, func(path string, r io.Reader) (*sandboxv1.FileInfo, error) {
		return c.sandboxd.Upload(ctx, sandboxID, path, r)
	})
}

// uploadFrom sends local ("-": stdin) to remote:path with send for
// command cmd, whose remote side is written as syntax; a path that is
// empty or ends in "/" takes the local file's name.
func (c *cli) uploadFrom(cmd, syntax, local, remote, path string, send func(string, io.Reader) (*sandboxv1.FileInfo, error)) int {
	what := cmd + " " + local
	var r io.Reader = c.stdin
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return c.fail(what, err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil && st.IsDir() {
			return usageErr(c.stderr, cmd, fmt.Errorf("%s is a directory; %s copies one file", local, cmd))
		}
		r = f
		if path == "" || strings.HasSuffix(path, "/") {
			path += filepath.Base(local)
		}
	} else if path == "" || strings.HasSuffix(path, "/") {
		return usageErr(c.stderr, cmd, errors.New("copying stdin needs a file name: "+syntax))
	}
	info, err := send(path, r)
	if err != nil {
		return c.fail(what, err)
	}
	fmt.Fprintf(c.stderr, "copied %s to %s:%s (%d bytes)\n", local, remote, termsafe.Field(info.GetPath()), info.GetSize())
	return exitOK
}
