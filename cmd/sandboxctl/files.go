package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"text/tabwriter"

	"github.com/sandboxd/sandboxd/client"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// cmdLs lists a directory of a sandbox's /workspace, one entry a line:
// mode, uid:gid, size, modification time, path.
func cmdLs(ctx context.Context, c *cli, args []string) int {
	fs := flag.NewFlagSet("ls", flag.ContinueOnError)
	depth := fs.Int("depth", 1, "levels to list (1-10)")
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
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	for _, f := range files {
		fmt.Fprintf(tw, "%s\t%d:%d\t%d\t%s\t%s\n", modeString(f), f.GetUid(), f.GetGid(), f.GetSize(), formatTime(f.GetModTime()), f.GetPath())
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
