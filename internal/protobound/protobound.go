// Package protobound checks a protobuf message's wire form before the
// message is built from it: building makes a map entry or list element
// per element, so a few MiB of tiny elements (an env map of 650,000 empty
// names) cost tens of MiB once built, and a client's request is hostile
// input until checked. Scan walks the bytes without building anything and
// counts the elements of every list and map, and the nesting; a door
// refuses a message past the bounds (InvalidArgument) before it unmarshals
// it. Both doors that take protobuf from clients use it: the gRPC door's
// codec and the E2B door's Connect codecs.
package protobound

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Bounds of one message.
const (
	// MaxElements bounds one list or map; the domain's own rules (256
	// environment variables, 64 metadata pairs) apply after, on what was
	// built.
	MaxElements = 4096
	// MaxTotalElements bounds the elements of all a message's lists and
	// maps, nested messages' included.
	MaxTotalElements = 16384
	// MaxDepth bounds nesting.
	MaxDepth = 32
)

// ErrElements and ErrDepth refuse a message past the bounds; their text is
// for the client.
var (
	ErrElements = fmt.Errorf("the message holds a list or map of more than %d elements, or more than %d in all", MaxElements, MaxTotalElements)
	ErrDepth    = fmt.Errorf("the message is nested deeper than %d levels", MaxDepth)
)

// Scan checks b, the wire form of a message of type md, against the
// bounds. Malformed bytes are left for proto.Unmarshal to refuse.
func Scan(b []byte, md protoreflect.MessageDescriptor) error {
	total := 0
	return scan(b, md, 0, &total)
}

func scan(b []byte, md protoreflect.MessageDescriptor, depth int, total *int) error {
	if depth > MaxDepth {
		return ErrDepth
	}
	var counts map[protowire.Number]int
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil
		}
		value := b[:n]
		b = b[n:]
		fd := md.Fields().ByNumber(num)
		if fd == nil {
			continue
		}
		if fd.IsList() || fd.IsMap() {
			elements := 1
			if typ == protowire.BytesType && fd.IsList() && fd.Kind() != protoreflect.MessageKind &&
				fd.Kind() != protoreflect.StringKind && fd.Kind() != protoreflect.BytesKind {
				// Packed scalars: at least a byte each.
				p, _ := protowire.ConsumeBytes(value)
				elements = len(p)
			}
			if counts == nil {
				counts = map[protowire.Number]int{}
			}
			counts[num] += elements
			*total += elements
			if counts[num] > MaxElements || *total > MaxTotalElements {
				return ErrElements
			}
		}
		if typ == protowire.BytesType && fd.Kind() == protoreflect.MessageKind {
			p, _ := protowire.ConsumeBytes(value)
			if err := scan(p, fd.Message(), depth+1, total); err != nil {
				return err
			}
		}
	}
	return nil
}
