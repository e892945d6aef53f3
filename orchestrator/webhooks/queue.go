package webhooks

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// queue is the endpoints' durable FIFO queues: one bbolt bucket per
// endpoint, keyed by a big-endian sequence number. Only the head of a
// bucket is ever removed (delivered, dropped as too old, or dropped to make
// room), so a bucket's keys are one contiguous range and its length is
// last-first+1, read in O(log n).
type queue struct {
	db *bolt.DB
}

// record is one queued event, as stored.
type record struct {
	ID      string          `json:"id"`
	Type    string          `json:"type"`
	Sandbox string          `json:"sandbox_id,omitempty"`
	Created time.Time       `json:"created"`
	Body    json.RawMessage `json:"body"`
}

// openQueue opens (creating) the queue file. A second sandboxd on the same
// state directory fails here instead of waiting on the file's lock.
func openQueue(path string) (*queue, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("open %s: locked by another process (another sandboxd on this state directory?)", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Publish's latency is one commit: coalesce concurrent ones, but wait
	// little for company.
	db.MaxBatchDelay = time.Millisecond
	return &queue{db: db}, nil
}

func (q *queue) close() error { return q.db.Close() }

// keep makes the buckets of names and removes the others' (endpoints no
// longer configured), returning how many events those held.
func (q *queue) keep(names []string) (removed map[string]int, err error) {
	removed = map[string]int{}
	err = q.db.Update(func(tx *bolt.Tx) error {
		want := map[string]bool{}
		for _, n := range names {
			want[n] = true
			if _, err := tx.CreateBucketIfNotExists([]byte(n)); err != nil {
				return err
			}
		}
		var stale [][]byte
		if err := tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if !want[string(name)] {
				stale = append(stale, append([]byte(nil), name...))
				removed[string(name)] = bucketLen(b)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, n := range stale {
			if err := tx.DeleteBucket(n); err != nil {
				return err
			}
		}
		return nil
	})
	return removed, err
}

// push appends rec to each endpoint's queue in one commit, dropping a
// queue's oldest events past its bound; it returns, per endpoint, the
// records dropped.
func (q *queue) push(rec record, to []*endpoint) (dropped map[string][]record, err error) {
	val, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	err = q.db.Batch(func(tx *bolt.Tx) error {
		dropped = nil // Batch may run this function again
		for _, ep := range to {
			b := tx.Bucket([]byte(ep.Name))
			if b == nil {
				return fmt.Errorf("queue of endpoint %s is missing", ep.Name)
			}
			for bucketLen(b) >= ep.MaxQueue {
				k, v := b.Cursor().First()
				var old record
				_ = json.Unmarshal(v, &old)
				if err := b.Delete(k); err != nil {
					return err
				}
				if dropped == nil {
					dropped = map[string][]record{}
				}
				dropped[ep.Name] = append(dropped[ep.Name], old)
			}
			seq, err := b.NextSequence()
			if err != nil {
				return err
			}
			if err := b.Put(seqKey(seq), val); err != nil {
				return err
			}
		}
		return nil
	})
	return dropped, err
}

// head returns the first record of an endpoint's queue and its key; ok is
// false when the queue is empty.
func (q *queue) head(name string) (rec record, key uint64, ok bool, err error) {
	err = q.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(name))
		if b == nil {
			return nil
		}
		k, v := b.Cursor().First()
		if k == nil {
			return nil
		}
		if err := json.Unmarshal(v, &rec); err != nil {
			// Written by this package; unreadable only if corrupted.
			rec = record{ID: "unreadable"}
		}
		key, ok = binary.BigEndian.Uint64(k), true
		return nil
	})
	return rec, key, ok, err
}

// remove deletes an endpoint's record with key (the head it read), if it
// is still there (a drop may have taken it meanwhile).
func (q *queue) remove(name string, key uint64) error {
	return q.db.Batch(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(name))
		if b == nil {
			return nil
		}
		return b.Delete(seqKey(key))
	})
}

// length is how many events wait for an endpoint.
func (q *queue) length(name string) (n int) {
	_ = q.db.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket([]byte(name)); b != nil {
			n = bucketLen(b)
		}
		return nil
	})
	return n
}

// bucketLen is a queue bucket's length: its keys are contiguous.
func bucketLen(b *bolt.Bucket) int {
	c := b.Cursor()
	first, _ := c.First()
	if first == nil {
		return 0
	}
	last, _ := c.Last()
	return int(binary.BigEndian.Uint64(last)-binary.BigEndian.Uint64(first)) + 1
}

func seqKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(nil, seq)
}
