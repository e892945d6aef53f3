// Package nftexpr builds the nftables expressions sandboxd's tables are
// made of (google/nftables' expr), each a match as nft(8) writes it, so
// that the Docker backend's host table (orchestrator/backend/docker) and a
// sandbox Pod's (orchestrator/backend/kube/podnet) say each match once.
package nftexpr

import (
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
)

// NFProto is "meta nfproto p" (unix.NFPROTO_IPV4, NFPROTO_IPV6).
func NFProto(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// L4 is "meta l4proto p" (unix.IPPROTO_TCP, IPPROTO_UDP).
func L4(p byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// DPort is "th dport port" (TCP or UDP: after an L4 match).
func DPort(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// DAddr4 is "ip daddr a" (a: 4 bytes; after an IPv4 match).
func DAddr4(a []byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: a},
	}
}

// Verdict is a rule's verdict ("accept", "drop").
func Verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
