package grpcapi

import (
	"context"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/internal/protobound"
)

// Requests are decoded by gRPC before any handler or interceptor sees
// them, and decoding builds a map entry or list element per element of the
// message: a 4 MiB ExecuteRequest of 330,000 env names is ~50 MB once
// built, and a client may send many at once. boundedCodec scans a
// message's wire form first (internal/protobound) and does not build one
// past the bounds. gRPC would turn an Unmarshal error into INTERNAL, so the
// codec records the refusal instead and the outermost interceptors
// (refusals) answer it INVALID_ARGUMENT, before authentication or the
// handler: what was not built cannot be handled.

// maxConcurrentStreams bounds the streams of one connection: a tenant's
// default share of the server's streams in progress (core.Policy).
const maxConcurrentStreams = 1024

// boundedCodec is gRPC's proto codec with protobound's scan in front.
type boundedCodec struct {
	base encoding.CodecV2
	// refused holds the messages left unbuilt, each with its reason,
	// until the interceptors take them.
	refused sync.Map
}

func newBoundedCodec() *boundedCodec {
	return &boundedCodec{base: encoding.GetCodecV2("proto")}
}

func (c *boundedCodec) Name() string { return c.base.Name() }

func (c *boundedCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }

func (c *boundedCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if m, ok := v.(proto.Message); ok {
		buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
		defer buf.Free()
		if err := protobound.Scan(buf.ReadOnlyData(), m.ProtoReflect().Descriptor()); err != nil {
			c.refused.Store(v, err)
			return nil
		}
		return proto.Unmarshal(buf.ReadOnlyData(), m)
	}
	return c.base.Unmarshal(data, v)
}

// refusal is the answer to a message the codec did not build, if m is one.
func (c *boundedCodec) refusal(m any) error {
	if err, ok := c.refused.LoadAndDelete(m); ok {
		return status.Errorf(codes.InvalidArgument, "request refused before it was read: %v", err)
	}
	return nil
}

// unary answers a request the codec did not build.
func (c *boundedCodec) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := c.refusal(req); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

// stream answers, from RecvMsg, each message of a stream the codec did not
// build.
func (c *boundedCodec) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &refusingStream{ServerStream: ss, c: c})
}

type refusingStream struct {
	grpc.ServerStream
	c *boundedCodec
}

func (s *refusingStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	return s.c.refusal(m)
}
