package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/docker/go-units"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/termsafe"
	sandboxv1 "github.com/sandboxd/sandboxd/proto/sandbox/v1"
)

// volumeSubcommands are volume's subcommands with their number of
// positional arguments (min, max).
var volumeSubcommands = map[string][2]int{
	"create": {1, 1}, "ls": {0, 0}, "get": {1, 1}, "rm": {1, 1},
	"cp": {2, 2}, "files": {1, 2}, "mkdir": {2, 2}, "rmfile": {2, 2},
}

const volumeSubcommandList = "create, ls, get, rm, cp, files, mkdir or rmfile"

// cmdVolume manages named volumes and their files: volume create|ls|get|rm
// for the volumes, cp|files|mkdir|rmfile for their files (as cp, ls, mkdir
// and rm are for a sandbox's /workspace).
func cmdVolume(ctx context.Context, c *cli, args []string) int {
	if len(args) == 0 {
		return usageErr(c.stderr, "volume", fmt.Errorf("want a subcommand: %s", volumeSubcommandList))
	}
	sub, args := args[0], args[1:]
	cmd := "volume " + sub
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	var size sizeFlag
	fs.Var(&size, "size", "create: the volume's capacity (e.g. 512MiB, 2GiB; default sandboxd's, 1 GiB)")
	tenant := fs.String("tenant", "", "ls: only this tenant's volumes (an admin's token)")
	force := fs.Bool("force", false, "rm: delete it even while sandboxes mount it (they keep running without it)")
	overwrite := fs.Bool("overwrite", false, "cp to a volume: replace an existing file")
	depth := fs.Int("depth", 1, "files: levels to list (1-10)")
	parents := fs.Bool("p", false, "mkdir: create missing parents; an existing directory is fine")
	recursive := fs.Bool("r", false, "rmfile: remove a directory with its content")
	var format formatFlag
	format.register(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return usageErr(c.stderr, cmd, err)
	}
	n, ok := volumeSubcommands[sub]
	switch {
	case !ok:
		return usageErr(c.stderr, "volume", fmt.Errorf("unknown subcommand %q (want %s)", sub, volumeSubcommandList))
	case len(pos) < n[0] || len(pos) > n[1]:
		want := fmt.Sprint(n[0])
		if n[1] != n[0] {
			want = fmt.Sprintf("%d or %d", n[0], n[1])
		}
		return usageErr(c.stderr, cmd, fmt.Errorf("want %s argument(s), got %d", want, len(pos)))
	}
	if sub == "cp" {
		return c.volumeCp(ctx, pos[0], pos[1], *overwrite)
	}
	rctx, cancel := rpcCtx(ctx)
	defer cancel()
	switch sub {
	case "create":
		v, err := c.sandboxd.CreateVolume(rctx, pos[0], int64(size))
		if err != nil {
			return c.fail(cmd+" "+pos[0], err)
		}
		if format == "json" {
			if err := writeJSON(c.stdout, v); err != nil {
				return c.fail(cmd, err)
			}
			return exitOK
		}
		fmt.Fprintf(c.stdout, "%s\t%s\t%s\n", termsafe.Field(v.GetId()), termsafe.Field(v.GetName()), units.BytesSize(float64(v.GetSizeBytes())))
	case "ls":
		list, err := c.sandboxd.ListVolumes(rctx, *tenant)
		if err != nil {
			return c.fail(cmd, err)
		}
		if format == "json" {
			if err := writeJSONList(c.stdout, list); err != nil {
				return c.fail(cmd, err)
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "VOLUME\tNAME\tTENANT\tSIZE\tUSED\tMOUNTED_BY\tCREATED")
		for _, v := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", termsafe.Field(v.GetId()), termsafe.Field(v.GetName()), termsafe.Field(v.GetTenant()), units.BytesSize(float64(v.GetSizeBytes())),
				units.BytesSize(float64(v.GetUsedBytes())), mountedBy(v), formatTime(v.GetCreatedAt()))
		}
		if err := tw.Flush(); err != nil {
			return c.fail(cmd, err)
		}
	case "get":
		v, err := c.sandboxd.GetVolume(rctx, pos[0])
		if err != nil {
			return c.fail(cmd+" "+pos[0], err)
		}
		if err := writeJSON(c.stdout, v); err != nil {
			return c.fail(cmd, err)
		}
	case "rm":
		if err := c.sandboxd.DeleteVolume(rctx, pos[0], *force); err != nil {
			return c.fail(cmd+" "+pos[0], err)
		}
	case "files":
		path := ""
		if len(pos) == 2 {
			path = pos[1]
		}
		files, err := c.sandboxd.ListVolumeFiles(rctx, pos[0], path, client.WithDepth(*depth))
		if err != nil {
			return c.fail(cmd+" "+pos[0]+":"+volumeDisplay(path), err)
		}
		if format == "json" {
			if err := writeJSONList(c.stdout, files); err != nil {
				return c.fail(cmd, err)
			}
			return exitOK
		}
		tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
		for _, f := range files {
			fmt.Fprintf(tw, "%s\t%d:%d\t%d\t%s\t%s\n", modeString(f), f.GetUid(), f.GetGid(), f.GetSize(), formatTime(f.GetModTime()), termsafe.Field(f.GetPath()))
		}
		if err := tw.Flush(); err != nil {
			return c.fail(cmd, err)
		}
	case "mkdir":
		if _, err := c.sandboxd.MakeVolumeDirectory(rctx, pos[0], pos[1], *parents); err != nil {
			return c.fail(cmd+" "+pos[1], err)
		}
	case "rmfile":
		if err := c.sandboxd.RemoveVolumeFile(rctx, pos[0], pos[1], *recursive); err != nil {
			return c.fail(cmd+" "+pos[1], err)
		}
	}
	return exitOK
}

// volumeCp copies one file between the local machine and a volume, as cp
// does with a sandbox: the side written as VOLUME:PATH is the volume's.
func (c *cli) volumeCp(ctx context.Context, src, dst string, overwrite bool) int {
	srcVol, srcPath, srcRemote := remoteSpec(src)
	dstVol, dstPath, dstRemote := remoteSpec(dst)
	switch {
	case srcRemote && dstRemote:
		return usageErr(c.stderr, "volume cp", errors.New("both sides are on a volume; copy through a local file"))
	case !srcRemote && !dstRemote:
		return usageErr(c.stderr, "volume cp", errors.New("neither side is on a volume; write one as VOLUME:PATH"))
	case srcRemote:
		if overwrite {
			return usageErr(c.stderr, "volume cp", errors.New("--overwrite applies to a copy onto a volume"))
		}
		return c.downloadTo("volume cp", srcVol, srcPath, volumeDisplay(srcPath), dst, func(w io.Writer) (*sandboxv1.FileInfo, error) {
			return c.sandboxd.DownloadVolumeFile(ctx, srcVol, srcPath, w)
		})
	default:
		return c.uploadFrom("volume cp", "VOLUME:PATH", src, dstVol, dstPath, func(path string, r io.Reader) (*sandboxv1.FileInfo, error) {
			return c.sandboxd.UploadVolumeFile(ctx, dstVol, path, r, overwrite)
		})
	}
}

// volumeDisplay shows a path on a volume as its root-relative form.
func volumeDisplay(p string) string {
	return "/" + strings.TrimLeft(p, "/")
}

// mountedBy shows the sandboxes mounting a volume ("-" for none).
func mountedBy(v *sandboxv1.Volume) string {
	if len(v.GetMountedBy()) == 0 {
		return "-"
	}
	ids := make([]string, 0, len(v.GetMountedBy()))
	for _, id := range v.GetMountedBy() {
		ids = append(ids, termsafe.Field(id))
	}
	return strings.Join(ids, ",")
}

// sizeFlag is a byte size given as 512MiB, 2GiB, 1g (binary units).
type sizeFlag int64

func (s *sizeFlag) String() string {
	if *s == 0 {
		return ""
	}
	return units.BytesSize(float64(*s))
}

func (s *sizeFlag) Set(v string) error {
	n, err := units.RAMInBytes(strings.TrimSpace(v))
	if err != nil || n <= 0 {
		return fmt.Errorf("size %q: want a positive size such as 512MiB or 2GiB", v)
	}
	*s = sizeFlag(n)
	return nil
}

// volumeList is exec's repeatable --volume VOLUME:/mnt/PATH[:ro].
type volumeList []client.AcquireOption

func (l *volumeList) String() string { return fmt.Sprintf("%d volume(s)", len(*l)) }

func (l *volumeList) Set(s string) error {
	ref, rest, ok := strings.Cut(s, ":")
	if !ok || ref == "" || rest == "" {
		return fmt.Errorf("volume %q: want VOLUME:/mnt/PATH or VOLUME:/mnt/PATH:ro", s)
	}
	path, mode, _ := strings.Cut(rest, ":")
	readOnly := false
	switch mode {
	case "":
	case "ro":
		readOnly = true
	case "rw":
	default:
		return fmt.Errorf("volume %q: the mode after the path is ro or rw, not %q", s, mode)
	}
	*l = append(*l, client.WithVolume(ref, path, readOnly))
	return nil
}
