package e2bapi

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"

	"connectrpc.com/connect"
	"github.com/sandboxd/sandboxd/internal/protobound"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// envd's Connect RPC messages are read whole (at most maxRPCBody, once
// decompressed) and then unmarshalled. Before a message is unmarshalled,
// its bytes are scanned, without building anything, for the number of
// elements of each list and map and for its nesting: a message of 8 MiB
// could otherwise hold ~650,000 env names, a map of ~60 MB once built. A
// message past the bounds is refused (InvalidArgument) before it is
// built. The JSON codecs (the SDKs send JSON) and the binary one are
// connect's, with the scan in front.

// Bounds of one RPC message.
const (
	// maxRPCElements, maxRPCTotalElements and maxRPCDepth are
	// protobound's, for the JSON form too (envd's envs and args; the
	// domain's own rules, 256 variables, apply after).
	maxRPCElements      = protobound.MaxElements
	maxRPCTotalElements = protobound.MaxTotalElements
	maxRPCDepth         = protobound.MaxDepth
)

// rpcHandlerOptions are envd's handlers' options: the message size, the
// bounded codecs, and a gzip whose output is bounded too.
func rpcHandlerOptions() []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithReadMaxBytes(maxRPCBody),
		connect.WithCodec(boundedProtoCodec{}),
		connect.WithCodec(boundedJSONCodec{name: "json"}),
		connect.WithCodec(boundedJSONCodec{name: "json; charset=utf-8"}),
		connect.WithCompression("gzip",
			func() connect.Decompressor { return &boundedGzip{} },
			func() connect.Compressor { return gzip.NewWriter(io.Discard) }),
	}
}

type boundedProtoCodec struct{}

func (boundedProtoCodec) Name() string { return "proto" }

func (boundedProtoCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return proto.Marshal(pm)
}

func (boundedProtoCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if err := protobound.Scan(b, pm.ProtoReflect().Descriptor()); err != nil {
		return err
	}
	return proto.Unmarshal(b, pm)
}

type boundedJSONCodec struct{ name string }

func (c boundedJSONCodec) Name() string { return c.name }

func (boundedJSONCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a proto.Message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (boundedJSONCodec) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a proto.Message", m)
	}
	if len(b) == 0 {
		return errors.New("zero-length payload is not a valid JSON object")
	}
	if err := scanJSON(b); err != nil {
		return err
	}
	// Unknown fields are discarded, as connect's own JSON codec does.
	return protojson.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(b, pm)
}

// errRPCElements and errRPCDepth refuse a message past the bounds.
var (
	errRPCElements = protobound.ErrElements
	errRPCDepth    = protobound.ErrDepth
)

// scanJSON counts the elements of each array and object of a JSON text
// (by their commas) and its nesting, allocating nothing past a stack of
// maxRPCDepth. It does not validate: protojson does, after.
func scanJSON(b []byte) error {
	var commas [maxRPCDepth + 1]int
	depth, total := 0, 0
	inString, escaped := false, false
	for _, c := range b {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			if depth++; depth > maxRPCDepth {
				return errRPCDepth
			}
			commas[depth] = 0
		case '}', ']':
			if depth > 0 {
				depth--
			}
		case ',':
			commas[depth]++
			total++
			if commas[depth] >= maxRPCElements || total >= maxRPCTotalElements {
				return errRPCElements
			}
		}
	}
	return nil
}

// boundedGzip is gzip that fails once it has produced more than
// maxRPCBody bytes: connect refuses a message past that size but reads the
// rest of the stream first, which, from a few MiB of compressed zeros,
// would be gigabytes of work.
type boundedGzip struct {
	gzip.Reader
	n int64
}

func (z *boundedGzip) Reset(r io.Reader) error {
	z.n = 0
	return z.Reader.Reset(r)
}

func (z *boundedGzip) Read(p []byte) (int, error) {
	if z.n > maxRPCBody {
		return 0, fmt.Errorf("the message is larger than %d bytes once decompressed", maxRPCBody)
	}
	n, err := z.Reader.Read(p)
	z.n += int64(n)
	return n, err
}
