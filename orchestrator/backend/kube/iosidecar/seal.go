package iosidecar

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/sandboxd/sandboxd/orchestrator/core"
	sandboxiov1 "github.com/sandboxd/sandboxd/proto/sandboxio/v1"
)

// Sealed header rules. A rule's header values are credentials the sandbox
// must never see. On the Docker backend their only copy is on the host; on
// Kubernetes the policy lives on the sandbox's Pod object (and its claim
// through a hibernation), which more may read than the Secrets, and
// crosses to the io sidecar over the Pod network. So sandboxd seals the
// values before either: AES-256-GCM under a key derived from the io token,
// which only sandboxd and the sidecars hold (the sandbox container cannot
// read the sidecar's environment: the Pod shares no process namespace),
// with the sandbox's ID as additional data, so a sealed blob copied onto
// another sandbox's Pod does not open there. The sidecar opens them as it
// puts the policy in force; the clear values are then in its memory
// alone (its state file keeps them sealed).
//
// Rotating the io token makes rules sealed before unreadable: the sidecar
// refuses such a policy (ErrRulesSealed) until it is set again.

// sealInfo names the key's purpose in the derivation.
const sealInfo = "sandboxd egress rules v1"

// maxSealedRules bounds a sealed blob: the largest policy core allows
// (core.MaxNetworkPolicySize, 64 KiB of names and values; a few bytes of
// framing per header) seals well under it.
const maxSealedRules = 256 << 10

// rulesAEAD is the cipher keyed for token.
func rulesAEAD(token string) (cipher.AEAD, error) {
	key, err := hkdf.Key(sha256.New, []byte(token), nil, sealInfo, 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// SealRules seals rules (clear header values) for sandbox id's sidecar,
// whose token is token: nil for no rules.
func SealRules(token, id string, rules map[string]core.NetworkRule) ([]byte, error) {
	if len(rules) == 0 {
		return nil, nil
	}
	var plain sandboxiov1.EgressRules
	for _, d := range slices.Sorted(maps.Keys(rules)) {
		plain.Rules = append(plain.Rules, &sandboxiov1.EgressRule{Domain: d, Headers: rules[d].Headers})
	}
	b, err := proto.Marshal(&plain)
	if err != nil {
		return nil, err
	}
	aead, err := rulesAEAD(token)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(b)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return aead.Seal(nonce, nonce, b, []byte(id)), nil
}

// OpenRules opens what SealRules sealed for sandbox id: the sidecar does, as
// it puts a policy in force.
func OpenRules(token, id string, sealed []byte) (map[string]core.NetworkRule, error) {
	if len(sealed) == 0 {
		return nil, nil
	}
	if len(sealed) > maxSealedRules {
		return nil, fmt.Errorf("%w: %d bytes sealed, more than %d", ErrRulesSealed, len(sealed), maxSealedRules)
	}
	aead, err := rulesAEAD(token)
	if err != nil {
		return nil, err
	}
	if len(sealed) < aead.NonceSize()+aead.Overhead() {
		return nil, fmt.Errorf("%w: %d bytes are too short to be sealed rules", ErrRulesSealed, len(sealed))
	}
	n := aead.NonceSize()
	b, err := aead.Open(nil, sealed[:n], sealed[n:], []byte(id))
	if err != nil {
		return nil, fmt.Errorf("%w: they were sealed under another io token (was it rotated? set the sandbox's network policy again) or for another sandbox", ErrRulesSealed)
	}
	var plain sandboxiov1.EgressRules
	if err := proto.Unmarshal(b, &plain); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrRulesSealed, err)
	}
	out := make(map[string]core.NetworkRule, len(plain.GetRules()))
	for _, r := range plain.GetRules() {
		out[r.GetDomain()] = core.NetworkRule{Headers: r.GetHeaders()}
	}
	return out, nil
}
