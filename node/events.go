package node

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultBuffer is the subscription buffer used when a caller passes a
// buffer size below 1.
const DefaultBuffer = 64

// EventKind is the kind of an ownership Event.
type EventKind uint8

// The ownership event kinds.
const (
	// ShardAcquired: this node started acting as owner of Shard at Epoch.
	ShardAcquired EventKind = iota + 1
	// ShardLost: this node stopped acting as owner of Shard (revoked and
	// drained, lease not renewed, resigned, node closing). Workers of the
	// shard have had their context cancelled.
	ShardLost
	// OwnerChanged: the committed owner or epoch of Shard changed (on any
	// node). Owner is "" while the shard is unowned.
	OwnerChanged
)

// String returns the kind's name.
func (k EventKind) String() string {
	switch k {
	case ShardAcquired:
		return "acquired"
	case ShardLost:
		return "lost"
	case OwnerChanged:
		return "owner-changed"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one ownership change as seen by this node. Events of one shard
// arrive in the order they happened; for a shard this node acquires, the
// OwnerChanged event precedes ShardAcquired, and ShardLost precedes the
// OwnerChanged that names the next owner.
type Event struct {
	Kind  EventKind
	Shard uint32
	// Epoch is the shard's epoch (the fencing token's epoch) after the change.
	Epoch uint64
	// Owner is the committed owner after the change ("" when unowned).
	Owner string
	// Previous is the committed owner before an OwnerChanged event.
	Previous string
	// At is this node's clock when it observed the change.
	At time.Time
}

// Token returns the event's fencing token.
func (e Event) Token() Token { return Token{Shard: e.Shard, Epoch: e.Epoch} }

// String formats the event for logs.
func (e Event) String() string {
	if e.Kind == OwnerChanged {
		return fmt.Sprintf("%s shard=%d epoch=%d owner=%q previous=%q", e.Kind, e.Shard, e.Epoch, e.Owner, e.Previous)
	}
	return fmt.Sprintf("%s shard=%d epoch=%d", e.Kind, e.Shard, e.Epoch)
}

// Subscription delivers values of type T (Event, ElectionEvent, JobEvent)
// through a buffered channel.
//
// Buffering: the node never blocks on a subscriber. When the buffer is full
// a value is dropped and Dropped is incremented; a subscriber that sees
// Dropped grow has missed changes and should re-read the state it tracks
// (Shards, an election's Leader, Job). Values are delivered in order.
// Close the subscription when done; the channel is closed when the
// subscription or the node is closed.
type Subscription[T any] struct {
	c       chan T
	dropped atomic.Uint64
	filter  func(T) bool

	mu     sync.Mutex
	closed bool
	hub    *hub[T]
}

// C returns the channel values arrive on.
func (s *Subscription[T]) C() <-chan T { return s.c }

// Dropped returns how many values were dropped because the buffer was full.
func (s *Subscription[T]) Dropped() uint64 { return s.dropped.Load() }

// Close stops delivery and closes the channel. It is safe to call more
// than once and concurrently with delivery.
func (s *Subscription[T]) Close() {
	if s.hub != nil {
		s.hub.remove(s)
	}
	s.closeChan()
}

func (s *Subscription[T]) closeChan() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.c)
	}
}

func (s *Subscription[T]) send(v T) {
	if s.filter != nil && !s.filter(v) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.c <- v:
	default:
		s.dropped.Add(1)
	}
}

// hub fans values out to subscriptions.
type hub[T any] struct {
	mu     sync.Mutex
	subs   map[*Subscription[T]]struct{}
	closed bool
}

func (h *hub[T]) subscribe(buffer int, filter func(T) bool) *Subscription[T] {
	if buffer < 1 {
		buffer = DefaultBuffer
	}
	s := &Subscription[T]{c: make(chan T, buffer), filter: filter, hub: h}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		s.closeChan()
		return s
	}
	if h.subs == nil {
		h.subs = make(map[*Subscription[T]]struct{})
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *hub[T]) remove(s *Subscription[T]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, s)
}

func (h *hub[T]) publish(vs ...T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, v := range vs {
		for s := range h.subs {
			s.send(v)
		}
	}
}

func (h *hub[T]) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		s.closeChan()
	}
	h.subs = nil
}

func (h *hub[T]) hasSubscribers() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}
