package wasm

import (
	"sync"
	"sync/atomic"
)

// OPAData is a data document for OPA evaluations, with an identity: an
// instance parses a document once, and keeps it for every evaluation given
// the same OPAData. NewOPAData makes one; the zero value stands for the data
// NewOPA was given. It is a small value, to copy freely.
type OPAData struct {
	id   uint64
	json []byte
}

var opaDataIDs atomic.Uint64

// NewOPAData returns doc, a JSON document, as data with an identity of its
// own. doc must not change afterwards. Make a new OPAData only when the
// document changes: every new one is parsed again by every instance it
// reaches.
func NewOPAData(doc []byte) OPAData {
	return OPAData{id: opaDataIDs.Add(1), json: doc}
}

// ID identifies d: two OPAData with the same ID hold the same document. The
// zero value's is 0; those of NewOPAData increase with each call.
func (d OPAData) ID() uint64 { return d.id }

// JSON returns the document.
func (d OPAData) JSON() []byte { return d.json }

// opaSnapshot is the memory and globals of an instance with a data
// document loaded. A new instance for that document starts from it instead
// of parsing the document again, and shares its pages until it writes
// them (snapshot_linux.go): N instances reading a large inventory hold
// about one parsed copy, not N. It does not change once taken.
type opaSnapshot struct {
	dataID  uint64
	mem     *memSnapshot
	pages   uint32   // memory size, in wasm pages
	globals []uint64 // values of the module's globals
	// The instance's addresses: the heap before any data, the data's
	// value, the heap after it.
	base, data, heap uint64
}

// opaSnapshots is the data-snapshot cache of one OPA: at most one snapshot,
// of the newest document it was asked to remember, and the state machine
// that decides when an instance is remembered.
//
// A document goes through these states:
//
//   - loaded: an instance parsed it (parsing); nothing else happens
//     while evaluations find an idle instance that holds it.
//   - wanted: an evaluation of it found every instance that holds it busy,
//     or parses it while another does (parsing), so the next instance of
//     it to be put back is to be remembered.
//   - pending: that instance is being remembered, in the background
//     (start hands the caller the function that ends this state);
//     evaluations of the document wait for it (pending) rather than parse
//     the document again.
//   - snapshotted: the instance's memory is the snapshot (keep), which
//     later instances of the document map copy-on-write (of).
//
// A newer document's snapshot replaces an older one's; a closed cache takes
// no more. It is safe for concurrent use.
type opaSnapshots struct {
	// mu guards every field below but remembering, which counts
	// goroutines and is safe on its own; it is held only for short
	// bookkeeping, never across a guest call or a copy of memory.
	mu     sync.Mutex
	snap   *opaSnapshot // of the newest document remembered; nil before
	closed bool
	// loaded is the newest document an instance loaded; wanted, a document
	// parsed a second time, or while another instance parsed it (parsing).
	loaded, wanted uint64
	// inParse counts, by document, the parses in flight.
	inParse map[uint64]int
	// pending holds, by document, a channel closed once the instance
	// being remembered is remembered and kept.
	pending map[uint64]chan struct{}

	// remembering counts the instances being remembered (between start
	// and the call of its result); close waits for them. Add is called
	// with mu held and closed false, so that close's Wait sees every one.
	remembering sync.WaitGroup
}

// parsing records that an instance starts to parse the document dataID,
// there being no snapshot of it, and returns the function to call once the
// parse has ended, with whether it succeeded.
//
// An evaluation parses a document when no idle instance holds it: if
// another instance loaded it, or is parsing it at the same time, the
// evaluations of that document need more than one instance, and it is
// wanted: the next instance of it to be put back is remembered (start), so
// that further instances start from it rather than parse it. A policy
// evaluated one request at a time never parses a document twice, and pays
// for no snapshot.
func (s *opaSnapshots) parsing(dataID uint64) (parsed func(ok bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.loaded == dataID || s.inParse[dataID] > 0 {
		s.wanted = dataID
	}
	if s.inParse == nil {
		s.inParse = map[uint64]int{}
	}
	s.inParse[dataID]++
	return func(ok bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.inParse[dataID]--; s.inParse[dataID] == 0 {
			delete(s.inParse, dataID)
		}
		if ok {
			s.loaded = max(s.loaded, dataID)
		}
	}
}

// newer reports whether the document dataID is newer than the snapshot's,
// or there is none, while s is open. s.mu must be held.
func (s *opaSnapshots) newer(dataID uint64) bool {
	return !s.closed && (s.snap == nil || s.snap.dataID < dataID)
}

// start returns nil unless an instance of the document dataID is to be
// remembered (wanted, and newer than the snapshot while s is open) and
// none is being remembered yet. Then it counts the instance in
// remembering, under the lock close takes to stop new ones, marks the
// document pending, and returns the function to call once the instance is
// remembered and kept (or dropped).
func (s *opaSnapshots) start(dataID uint64) (remembered func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.wanted != dataID || !s.newer(dataID) || s.pending[dataID] != nil {
		return nil
	}
	s.remembering.Add(1)
	if s.pending == nil {
		s.pending = map[uint64]chan struct{}{}
	}
	done := make(chan struct{})
	s.pending[dataID] = done
	return func() {
		s.mu.Lock()
		delete(s.pending, dataID)
		s.mu.Unlock()
		close(done)
		s.remembering.Done()
	}
}

// pendingFor returns a channel closed once the instance of the document
// dataID being remembered is kept, or nil when none is.
func (s *opaSnapshots) pendingFor(dataID uint64) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pending[dataID]
}

// of returns the snapshot of the document dataID, or nil.
func (s *opaSnapshots) of(dataID uint64) *opaSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap != nil && s.snap.dataID == dataID {
		return s.snap
	}
	return nil
}

// remember makes the state of in, an instance of m, the snapshot new
// instances for its document start from, unless the snapshot is of that
// document or a newer one already. in has evaluated since it loaded the
// document, which left nothing below the heap mark after the data that the
// next evaluation would not meet on in itself. Taking the snapshot maps
// in's memory onto it, copy-on-write.
func (s *opaSnapshots) remember(in *opaInstance, m *Module) error {
	size := in.mod.Memory().Size()
	mem, err := takeSnapshot(in.mem, int(size))
	if err != nil {
		return err
	}
	snap := &opaSnapshot{dataID: in.dataID, mem: mem, pages: size / pageSize, globals: in.saveGlobals(m),
		base: in.base, data: in.data, heap: in.heap}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.newer(in.dataID) {
		// s was closed, or a newer document remembered, meanwhile; in
		// keeps its mapping of the snapshot it took.
		mem.release()
		return nil
	}
	if s.snap != nil {
		// Instances mapping the old snapshot keep their mappings.
		s.snap.mem.release()
	}
	s.snap = snap
	return nil
}

// close takes no more snapshots, waits for the instances being remembered,
// and releases the snapshot. Instances that map it keep their mappings.
func (s *opaSnapshots) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.remembering.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.snap != nil {
		s.snap.mem.release()
		s.snap = nil
	}
}

// rebase puts in in the state of s: its memory becomes a mapping of the
// snapshot, with the snapshot's globals and addresses. For an instance that
// parsed the document of s itself before s was taken, this drops its
// private copy of the document.
func rebase(in *opaInstance, s *opaSnapshot) error {
	in.mem.snap = s.mem
	if err := in.startFrom(in.mod, s.pages, s.globals); err != nil {
		return err
	}
	in.base, in.dataID, in.data, in.heap = s.base, s.dataID, s.data, s.heap
	return nil
}
