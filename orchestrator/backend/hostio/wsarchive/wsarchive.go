// Package wsarchive is a snapshot's portable form: one POSIX tar stream
// (PAX format) holding, optionally first, a regular file named "globals"
// (the sandbox's saved Python globals, opaque here), then the tree of the
// sandbox's /workspace under "workspace/" ("workspace/" itself, then
// "workspace/a/", "workspace/a/b.txt", "workspace/l", ...).
//
// Both ends distrust the other: the workspace was written by a hostile
// sandbox, concurrently with Write, and the archive Extract reads may have
// been altered. So the tree is only ever reached through an *os.Root,
// symlinks are archived and created as links and never followed, entries
// other than directories, regular files and symlinks are skipped, names
// must be clean and under "workspace/", and both directions are bounded
// (Limits).
package wsarchive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// Names in the archive.
const (
	// GlobalsName is the globals entry's name.
	GlobalsName = "globals"
	// Prefix starts every workspace entry's name; the workspace itself is
	// the entry Prefix.
	Prefix = "workspace/"
)

// Bounds.
const (
	// DefaultMaxBytes is Limits.MaxBytes when 0.
	DefaultMaxBytes = 10 << 30
	// DefaultMaxEntries is Limits.MaxEntries when 0.
	DefaultMaxEntries = 200_000
	// MaxNameLen bounds an entry's path under the workspace and a symlink's
	// target, in bytes (Linux's PATH_MAX): longer ones are skipped by
	// Write, refused by Extract. It keeps EntryFraming a constant.
	MaxNameLen = 4096
	// MaxDepth bounds how deep Write descends; deeper directories are
	// skipped.
	MaxDepth = 256
	// EntryFraming bounds the tar framing of one entry beyond its name,
	// link target and content (which the byte budget counts): a header
	// block, a PAX header block, the PAX records' overhead rounded up to a
	// block, and the content's padding.
	EntryFraming = 2560
	// endFraming is the end-of-archive marker: two zero blocks.
	endFraming = 2 * blockSize
	blockSize  = 512
	// maxSkippedListed bounds Stats.Skipped.
	maxSkippedListed = 20
	// maxTrailer bounds what may follow the end-of-archive marker (zeros
	// only: some writers pad to a record size).
	maxTrailer = 20 * blockSize
)

// Limits bound an archive both ways.
type Limits struct {
	// MaxBytes bounds the bytes an archive carries: the content of its
	// regular files (globals included) and its entries' names and link
	// targets. 0: DefaultMaxBytes.
	MaxBytes int64
	// MaxEntries bounds its entries (Write: the workspace's entries seen,
	// skipped ones included). 0: DefaultMaxEntries.
	MaxEntries int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	return l
}

// MaxArchiveBytes is the most bytes an archive within l can take on the
// wire, framing included: what a reader of someone else's archive bounds
// its input with. Write never produces more, Extract never reads more.
func (l Limits) MaxArchiveBytes() int64 {
	l = l.withDefaults()
	return l.MaxBytes + int64(l.MaxEntries)*EntryFraming + endFraming
}

// Stats is what Write archived or Extract extracted.
type Stats struct {
	// Entries counts the entries written (Write) or read (Extract),
	// globals included, skipped ones not.
	Entries int
	// Bytes counts the content bytes of regular files, globals included.
	Bytes int64
	// Skipped lists paths relative to /workspace that were not kept, each
	// with why ("fifo: a FIFO"); at most 20.
	Skipped []string
	// SkippedCount counts every path not kept.
	SkippedCount int
}

func (s *Stats) skip(rel, why string) {
	s.SkippedCount++
	if len(s.Skipped) < maxSkippedListed {
		s.Skipped = append(s.Skipped, rel+": "+why)
	}
}

// Owner is who Extract gives every entry it creates to.
type Owner struct{ UID, GID int }

// skip says whether chown is pointless: a process that is not root but
// runs as the owner already creates its files with that owner (and could
// not chown them anyway).
func (o Owner) skip() bool {
	euid := os.Geteuid()
	return euid != 0 && euid == o.UID
}

var (
	// ErrTooLarge is wrapped by the error of an archive or workspace that
	// passed a Limit.
	ErrTooLarge = errors.New("archive too large")
	// ErrBadArchive is wrapped by Extract's errors for an archive that is
	// malformed or asks for what it may not (a name outside the workspace,
	// a second globals entry, a truncated stream).
	ErrBadArchive = errors.New("bad workspace archive")
)

func badArchive(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrBadArchive, fmt.Sprintf(format, args...))
}

// budget counts an archive against its Limits as it is written or read.
type budget struct {
	lim     Limits
	entries int
	bytes   int64
}

// entry counts one more entry.
func (b *budget) entry() error {
	if b.entries >= b.lim.MaxEntries {
		return fmt.Errorf("%w: more than %d entries (MaxEntries)", ErrTooLarge, b.lim.MaxEntries)
	}
	b.entries++
	return nil
}

// take counts n more bytes, refusing them all if they do not fit.
func (b *budget) take(n int64) error {
	if n < 0 || n > b.lim.MaxBytes-b.bytes {
		return fmt.Errorf("%w: more than %d bytes of content (MaxBytes; %d already, %d more)", ErrTooLarge, b.lim.MaxBytes, b.bytes, n)
	}
	b.bytes += n
	return nil
}

// Write writes the archive to w: globals first when not nil (its size as
// its Stat says when called), then the tree of ws. The sandbox may change
// the tree meanwhile: what changed type between the listing and the open
// is skipped, a file that shrank is padded with zeros to the size it had
// when opened, one that grew is cut there. The archive is bounded by lim
// (ErrTooLarge); w's own errors are returned as they are.
func Write(ctx context.Context, w io.Writer, ws *os.Root, globals *os.File, lim Limits) (Stats, error) {
	lim = lim.withDefaults()
	cw := &countWriter{w: w, max: lim.MaxArchiveBytes()}
	a := &archiver{ctx: ctx, ws: ws, tw: tar.NewWriter(cw), b: budget{lim: lim}}
	if globals != nil {
		if err := a.globals(globals); err != nil {
			return a.st, err
		}
	}
	if err := a.root(); err != nil {
		return a.st, err
	}
	if err := a.tw.Close(); err != nil {
		return a.st, err
	}
	return a.st, nil
}

// archiver is one Write.
type archiver struct {
	ctx context.Context
	ws  *os.Root
	tw  *tar.Writer
	b   budget
	st  Stats
}

// header writes hdr, counting its name and link target.
func (a *archiver) header(hdr *tar.Header) error {
	hdr.Format = tar.FormatPAX // keeps long and non-UTF-8 names, and mtimes' nanoseconds
	if err := a.b.take(int64(len(hdr.Name) + len(hdr.Linkname))); err != nil {
		return err
	}
	if err := a.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive %s: %w", hdr.Name, err)
	}
	a.st.Entries++
	return nil
}

// content copies exactly size bytes of r: zeros when r ends early (tar
// needs the declared size), nothing past size.
func (a *archiver) content(r io.Reader, size int64, name string) error {
	n, err := io.CopyN(a.tw, &ctxReader{ctx: a.ctx, r: r}, size)
	if err == io.EOF {
		_, err = io.CopyN(a.tw, zeros{}, size-n)
	}
	if err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	a.st.Bytes += size
	return nil
}

func (a *archiver) globals(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("archive the globals: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("archive the globals: not a regular file (%v)", st.Mode().Type())
	}
	if err := a.b.entry(); err != nil {
		return err
	}
	if err := a.b.take(st.Size()); err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: GlobalsName, Mode: 0o600, Size: st.Size(), ModTime: st.ModTime()}
	if err := a.header(hdr); err != nil {
		return err
	}
	return a.content(io.NewSectionReader(f, 0, st.Size()), st.Size(), GlobalsName)
}

// root archives the workspace itself, then its tree.
func (a *archiver) root() error {
	if err := a.b.entry(); err != nil {
		return err
	}
	d, err := a.ws.OpenFile(".", os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("open the workspace: %w", err)
	}
	return a.dir(".", d, 0)
}

// dir archives directory rel, open as d (which it closes), then its
// entries, sorted by name.
func (a *archiver) dir(rel string, d *os.File, depth int) error {
	names, err := a.list(rel, d)
	if err != nil {
		return err
	}
	for _, name := range names {
		if err := a.ctx.Err(); err != nil {
			return err
		}
		if err := a.b.entry(); err != nil {
			return err
		}
		child := name
		if rel != "." {
			child = rel + "/" + name
		}
		if err := a.entry(child, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// list writes directory rel's header from d and returns its entries'
// names, sorted. Listing stops (ErrTooLarge) once there are more than the
// entries left.
func (a *archiver) list(rel string, d *os.File) ([]string, error) {
	defer d.Close()
	st, err := d.Stat()
	if err != nil {
		return nil, fmt.Errorf("archive %s: %w", rel, err)
	}
	if err := a.header(&tar.Header{Typeflag: tar.TypeDir, Name: tarName(rel, true), Mode: int64(st.Mode().Perm()), ModTime: st.ModTime()}); err != nil {
		return nil, err
	}
	left := a.b.lim.MaxEntries - a.b.entries
	var names []string
	for {
		batch, err := d.Readdirnames(1024)
		names = append(names, batch...)
		if len(names) > left {
			return nil, fmt.Errorf("%w: more than %d entries (MaxEntries)", ErrTooLarge, a.b.lim.MaxEntries)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", rel, err)
		}
	}
	slices.Sort(names)
	return names, nil
}

// entry archives the workspace's entry rel, depth levels down.
func (a *archiver) entry(rel string, depth int) error {
	if len(rel) > MaxNameLen {
		a.st.skip(rel[:64]+"…", fmt.Sprintf("a path longer than %d bytes", MaxNameLen))
		return nil
	}
	st, err := a.ws.Lstat(rel)
	if err != nil {
		return a.changed(rel, err)
	}
	switch mode := st.Mode(); {
	case mode.IsDir():
		if depth > MaxDepth {
			a.st.skip(rel, fmt.Sprintf("a directory deeper than %d levels", MaxDepth))
			return nil
		}
		d, err := a.ws.OpenFile(rel, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return a.changed(rel, err)
		}
		return a.dir(rel, d, depth)
	case mode.IsRegular():
		return a.file(rel)
	case mode.Type() == fs.ModeSymlink:
		target, err := a.ws.Readlink(rel)
		if err != nil {
			return a.changed(rel, err)
		}
		if len(target) > MaxNameLen {
			a.st.skip(rel, fmt.Sprintf("a symbolic link whose target is longer than %d bytes", MaxNameLen))
			return nil
		}
		return a.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: tarName(rel, false), Linkname: target, Mode: 0o777, ModTime: st.ModTime()})
	default:
		a.st.skip(rel, typeName(mode))
		return nil
	}
}

// file archives regular file rel, as it is when opened.
func (a *archiver) file(rel string) error {
	f, err := a.ws.OpenFile(rel, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return a.changed(rel, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("archive %s: %w", rel, err)
	}
	if !st.Mode().IsRegular() {
		a.st.skip(rel, typeName(st.Mode())+" (was a regular file when listed)")
		return nil
	}
	if err := a.b.take(st.Size()); err != nil {
		return err
	}
	name := tarName(rel, false)
	if err := a.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(st.Mode().Perm()), Size: st.Size(), ModTime: st.ModTime()}); err != nil {
		return err
	}
	return a.content(f, st.Size(), name)
}

// changed skips rel when err says the sandbox changed it since it was
// listed (removed, or replaced by another type), or made it unreadable;
// any other error is returned.
func (a *archiver) changed(rel string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		a.st.skip(rel, "removed while archiving")
	case errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENXIO):
		a.st.skip(rel, "changed type while archiving")
	case errors.Is(err, fs.ErrPermission):
		a.st.skip(rel, "permission denied")
	default:
		return fmt.Errorf("archive %s: %w", rel, err)
	}
	return nil
}

// tarName is rel's name in the archive.
func tarName(rel string, dir bool) string {
	switch {
	case rel == ".":
		return Prefix
	case dir:
		return Prefix + rel + "/"
	}
	return Prefix + rel
}

// typeName says what a skipped entry is.
func typeName(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeCharDevice != 0:
		return "a character device"
	case mode&fs.ModeDevice != 0:
		return "a block device"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}

// countWriter bounds what Write writes: an archive larger than its limits
// allow is a bug of this package, never sent.
type countWriter struct {
	w      io.Writer
	n, max int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.max-c.n {
		return 0, fmt.Errorf("%w: the archive passed %d bytes", ErrTooLarge, c.max)
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ctxReader ends a copy when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// Extract reads an archive from r into ws, which should be empty or a
// fresh workspace: what is in the way of an entry is removed (never
// followed), the entry created through the root (which refuses to leave
// it, through the archive's own symlinks too), owned by owner, with the
// entry's permission bits (setuid, setgid and sticky dropped) and mtime.
// The globals entry, when there is one, goes to the writer openGlobals
// returns (called at most once, closed by Extract); an archive with one
// when openGlobals is nil is refused. Hard links, devices and FIFOs are
// skipped. A name outside the workspace, a second globals entry or a
// truncated archive is ErrBadArchive, passing lim ErrTooLarge; r's own
// errors are returned as they are. What was extracted before an error
// stays.
func Extract(ctx context.Context, r io.Reader, ws *os.Root, openGlobals func() (io.WriteCloser, error), owner Owner, lim Limits) (Stats, error) {
	lim = lim.withDefaults()
	cr := &countReader{r: r, max: lim.MaxArchiveBytes()}
	x := &extractor{ctx: ctx, ws: ws, tr: tar.NewReader(cr), cr: cr, b: budget{lim: lim}, owner: owner, openGlobals: openGlobals}
	if err := x.run(); err != nil {
		return x.st, err
	}
	return x.st, nil
}

// extractor is one Extract.
type extractor struct {
	ctx         context.Context
	ws          *os.Root
	tr          *tar.Reader
	cr          *countReader
	b           budget
	st          Stats
	owner       Owner
	openGlobals func() (io.WriteCloser, error)
	globals     bool
	dirs        []dirMeta // set once their content is in
}

// dirMeta is what a directory gets after its content: its mode and mtime
// (a read-only directory must not stop its files, and every file created
// in it changes its mtime).
type dirMeta struct {
	rel   string
	perm  fs.FileMode
	mtime time.Time
}

func (x *extractor) run() error {
	var end int64 // where the last entry's content ended
	for {
		if err := x.ctx.Err(); err != nil {
			return err
		}
		hdr, err := x.tr.Next()
		if err == io.EOF {
			return x.finish(end)
		}
		if err != nil {
			return x.readErr("read the archive", err)
		}
		if err := x.b.entry(); err != nil {
			return err
		}
		if err := x.entry(hdr); err != nil {
			return err
		}
		if _, err := x.copy(io.Discard, hdr.Name, -1); err != nil { // what an entry left unread
			return err
		}
		end = x.cr.n
	}
}

// readErr is the error of a read of the archive: r's own failure (or its
// bound) as it is, anything else the archive's fault.
func (x *extractor) readErr(what string, err error) error {
	if x.cr.err != nil {
		return x.cr.err
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return badArchive("%s: the archive is truncated", what)
	}
	return badArchive("%s: %v", what, err)
}

// finish checks the archive's end, then gives the directories their mode
// and mtime, deepest last listed first. tar.Reader reports the end of its
// input at an entry's boundary as the archive's end: the end-of-archive
// marker (two zero blocks, right after the last entry's content and
// padding) is checked here, so that a cut archive is not taken for a
// smaller one.
func (x *extractor) finish(end int64) error {
	if x.cr.err != nil {
		return x.cr.err
	}
	pad := (blockSize - end%blockSize) % blockSize
	if x.cr.n-end-pad != endFraming {
		return badArchive("the archive is truncated: its end-of-archive marker is missing")
	}
	var tail [blockSize]byte
	var n int
	for {
		m, err := x.cr.Read(tail[:])
		n += m
		if slices.ContainsFunc(tail[:m], func(b byte) bool { return b != 0 }) || n > maxTrailer {
			return badArchive("data follows the end of the archive")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	for _, d := range slices.Backward(x.dirs) {
		if err := x.ws.Chmod(d.rel, d.perm); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("extract %s: %w", tarName(d.rel, true), err)
		}
		_ = x.ws.Chtimes(d.rel, time.Time{}, d.mtime) // best effort
	}
	return nil
}

// copy copies the current entry's content to w, counted against the byte
// budget while read; size, when not negative, is what the header declared
// and is refused at once when it does not fit. w's errors are the file
// system's, wrapped; the read's are readErr's.
func (x *extractor) copy(w io.Writer, name string, size int64) (int64, error) {
	left := x.b.lim.MaxBytes - x.b.bytes
	if size > left {
		return 0, fmt.Errorf("%w: entry %s of %d bytes passes MaxBytes (%d; %d left)", ErrTooLarge, short(name), size, x.b.lim.MaxBytes, left)
	}
	ew := &errWriter{w: w}
	n, err := io.Copy(ew, &ctxReader{ctx: x.ctx, r: io.LimitReader(x.tr, left+1)})
	x.b.bytes += n
	switch {
	case ew.err != nil:
		return n, fmt.Errorf("extract %s: %w", short(name), ew.err)
	case n > left:
		return n, fmt.Errorf("%w: entry %s passes MaxBytes (%d)", ErrTooLarge, short(name), x.b.lim.MaxBytes)
	case err != nil && x.ctx.Err() != nil:
		return n, x.ctx.Err()
	case err != nil:
		return n, x.readErr("read "+short(name), err)
	case size >= 0 && n != size:
		return n, badArchive("entry %q has %d bytes, not the %d its header says", short(name), n, size)
	}
	return n, nil
}

// errWriter keeps its writer's error apart from the reader's.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// entry extracts one entry.
func (x *extractor) entry(hdr *tar.Header) error {
	if sparse(hdr) {
		return badArchive("entry %q: sparse files are not supported", short(hdr.Name))
	}
	if hdr.Name == GlobalsName {
		return x.globalsEntry(hdr)
	}
	rel, err := relName(hdr.Name)
	if err != nil {
		return err
	}
	if err := x.b.take(int64(len(hdr.Name) + len(hdr.Linkname))); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return x.dir(rel, hdr)
	case tar.TypeReg, tar.TypeRegA:
		if rel == "." || strings.HasSuffix(hdr.Name, "/") {
			return badArchive("entry %q: a file named like a directory", short(hdr.Name))
		}
		return x.file(rel, hdr)
	case tar.TypeSymlink:
		if rel == "." {
			return badArchive("entry %q: the workspace itself cannot be a link", short(hdr.Name))
		}
		return x.symlink(rel, hdr)
	case tar.TypeLink:
		x.st.skip(rel, "a hard link")
	case tar.TypeChar:
		x.st.skip(rel, "a character device")
	case tar.TypeBlock:
		x.st.skip(rel, "a block device")
	case tar.TypeFifo:
		x.st.skip(rel, "a FIFO")
	default:
		x.st.skip(rel, fmt.Sprintf("an entry of type %q", hdr.Typeflag))
	}
	return nil
}

// sparse says whether hdr is a sparse file's, which Write never makes:
// its content on the wire is not its size, which finish relies on.
func sparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// relName is a workspace entry's path relative to the workspace ("." for
// the workspace itself). The name must be clean already: no "..", ".",
// empty component or absolute path is cleaned into something else.
func relName(name string) (string, error) {
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		if name == strings.TrimSuffix(Prefix, "/") {
			return ".", nil
		}
		return "", badArchive("entry %q is neither %q nor under %q", short(name), GlobalsName, Prefix)
	}
	rest = strings.TrimSuffix(rest, "/")
	if rest == "" {
		return ".", nil
	}
	if strings.ContainsRune(rest, 0) || path.IsAbs(rest) || path.Clean(rest) != rest || rest == "." || rest == ".." || strings.HasPrefix(rest, "../") {
		return "", badArchive("entry %q: not a clean path under %q", short(name), Prefix)
	}
	if len(rest) > MaxNameLen {
		return "", badArchive("entry %q: a path longer than %d bytes", short(name), MaxNameLen)
	}
	return rest, nil
}

// short bounds a name from the archive in an error.
func short(s string) string {
	if len(s) > 256 {
		return s[:256] + "…"
	}
	return s
}

func (x *extractor) globalsEntry(hdr *tar.Header) error {
	switch {
	case hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeRegA:
		return badArchive("the globals entry is not a regular file")
	case x.globals:
		return badArchive("a second globals entry")
	case x.openGlobals == nil:
		return badArchive("the archive has a globals entry; none was expected")
	}
	x.globals = true
	if err := x.b.take(int64(len(hdr.Name))); err != nil {
		return err
	}
	if hdr.Size > x.b.lim.MaxBytes-x.b.bytes {
		_, err := x.copy(io.Discard, GlobalsName, hdr.Size) // ErrTooLarge
		return err
	}
	w, err := x.openGlobals()
	if err != nil {
		return fmt.Errorf("extract the globals: %w", err)
	}
	n, err := x.copy(w, GlobalsName, hdr.Size)
	if cerr := w.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("extract the globals: %w", cerr)
	}
	if err != nil {
		return err
	}
	x.st.Entries++
	x.st.Bytes += n
	return nil
}

// parents creates rel's missing parent directories, owned by the owner.
// An existing parent may be a symlink to a directory within the root.
func (x *extractor) parents(rel string) error {
	dir := path.Dir(rel)
	if dir == "." {
		return nil
	}
	var prefix string
	for elem := range strings.SplitSeq(dir, "/") {
		prefix = path.Join(prefix, elem)
		err := x.ws.Mkdir(prefix, 0o755)
		if errors.Is(err, fs.ErrExist) {
			st, serr := x.ws.Stat(prefix)
			if serr != nil {
				return fmt.Errorf("extract %s: %w", tarName(prefix, true), serr)
			}
			if !st.IsDir() {
				return fmt.Errorf("extract %s: %s is not a directory: %w", tarName(rel, false), tarName(prefix, false), syscall.ENOTDIR)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("extract %s: %w", tarName(prefix, true), err)
		}
		if err := x.lchown(prefix); err != nil {
			return err
		}
	}
	return nil
}

// clear removes what is at rel, if anything: a directory with its
// content, anything else (a symlink: not its target) by itself.
func (x *extractor) clear(rel string) error {
	st, err := x.ws.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
	case st.IsDir():
		err = x.ws.RemoveAll(rel)
	default:
		err = x.ws.Remove(rel)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("extract %s: remove what is there: %w", tarName(rel, false), err)
	}
	return nil
}

func (x *extractor) lchown(rel string) error {
	if x.owner.skip() {
		return nil
	}
	if err := x.ws.Lchown(rel, x.owner.UID, x.owner.GID); err != nil {
		return fmt.Errorf("extract %s: %w", tarName(rel, false), err)
	}
	return nil
}

func (x *extractor) dir(rel string, hdr *tar.Header) error {
	if rel != "." {
		if err := x.parents(rel); err != nil {
			return err
		}
		st, err := x.ws.Lstat(rel)
		switch {
		case err == nil && st.IsDir(): // kept, given the entry's mode at the end
		case err == nil || errors.Is(err, fs.ErrNotExist):
			if err := x.clear(rel); err != nil {
				return err
			}
			if err := x.ws.Mkdir(rel, 0o700); err != nil {
				return fmt.Errorf("extract %s: %w", short(hdr.Name), err)
			}
		default:
			return fmt.Errorf("extract %s: %w", short(hdr.Name), err)
		}
	}
	if err := x.lchown(rel); err != nil {
		return err
	}
	x.dirs = append(x.dirs, dirMeta{rel: rel, perm: fs.FileMode(hdr.Mode).Perm(), mtime: hdr.ModTime})
	x.st.Entries++
	return nil
}

func (x *extractor) file(rel string, hdr *tar.Header) error {
	if hdr.Size > x.b.lim.MaxBytes-x.b.bytes {
		_, err := x.copy(io.Discard, hdr.Name, hdr.Size) // ErrTooLarge, before anything is created
		return err
	}
	if err := x.parents(rel); err != nil {
		return err
	}
	if err := x.clear(rel); err != nil {
		return err
	}
	// O_EXCL after clear: an existing inode (a hard link the sandbox
	// made, a FIFO it swapped in) is never written through.
	f, err := x.ws.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err != nil {
		return fmt.Errorf("extract %s: %w", hdr.Name, err)
	}
	n, err := x.writeFile(f, hdr)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("extract %s: %w", hdr.Name, cerr)
	}
	if err != nil {
		return err
	}
	_ = x.ws.Chtimes(rel, time.Time{}, hdr.ModTime) // best effort
	x.st.Entries++
	x.st.Bytes += n
	return nil
}

// writeFile gives the new file f its owner and mode (by descriptor: no
// path involved) and content.
func (x *extractor) writeFile(f *os.File, hdr *tar.Header) (int64, error) {
	if !x.owner.skip() {
		if err := f.Chown(x.owner.UID, x.owner.GID); err != nil {
			return 0, fmt.Errorf("extract %s: %w", hdr.Name, err)
		}
	}
	if err := f.Chmod(fs.FileMode(hdr.Mode).Perm()); err != nil {
		return 0, fmt.Errorf("extract %s: %w", hdr.Name, err)
	}
	return x.copy(f, hdr.Name, hdr.Size)
}

func (x *extractor) symlink(rel string, hdr *tar.Header) error {
	target := hdr.Linkname
	switch {
	case target == "":
		return badArchive("entry %q: a symbolic link without a target", short(hdr.Name))
	case len(target) > MaxNameLen:
		return badArchive("entry %q: a link target longer than %d bytes", short(hdr.Name), MaxNameLen)
	case strings.ContainsRune(target, 0):
		return badArchive("entry %q: a link target with a NUL byte", short(hdr.Name))
	}
	if err := x.parents(rel); err != nil {
		return err
	}
	if err := x.clear(rel); err != nil {
		return err
	}
	if err := x.ws.Symlink(target, rel); err != nil {
		return fmt.Errorf("extract %s: %w", hdr.Name, err)
	}
	if err := x.lchown(rel); err != nil {
		return err
	}
	x.st.Entries++
	return nil
}

// countReader bounds and counts what Extract reads, and keeps r's own
// failure apart from the archive's.
type countReader struct {
	r      io.Reader
	n, max int64
	err    error // r's failure (not io.EOF), or the bound's
}

func (c *countReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if left := c.max - c.n; int64(len(p)) > left+1 {
		p = p[:left+1]
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		c.err = fmt.Errorf("%w: the archive is larger than %d bytes", ErrTooLarge, c.max)
		return 0, c.err
	}
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}
