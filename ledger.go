package analytics

// ledger counts accepted events until their final disposition (R41):
// dequeueing, batching and waiting discharge nothing, so Flush and Close
// never return early and never hang because a path skipped the discharge.
//
// Events are counted in epochs. A Flush or Close that finds events in the
// current epoch starts a new one and waits for the older ones to retire, so
// it waits exactly for the events accepted before it, whatever order their
// batches finish in. A Flush that finds the current epoch empty waits on
// the previous epoch instead of starting another, so the ledger holds at
// most one epoch per outstanding event, however often Flush is called.
// Guarded by queue.mu.
type ledger struct {
	epochs []epochCount // oldest first; the last one is current
	base   uint64       // number of epochs[0]
	total  int
}

type epochCount struct {
	pending int
	done    chan struct{} // made by mark, closed when the epoch retires
}

func newLedger() ledger {
	return ledger{epochs: []epochCount{{}}, base: 1}
}

func (l *ledger) current() uint64 { return l.base + uint64(len(l.epochs)) - 1 }

// add counts one accepted event and returns its epoch.
func (l *ledger) add() uint64 {
	l.epochs[len(l.epochs)-1].pending++
	l.total++
	return l.current()
}

// addN counts n accepted events and returns their epoch.
func (l *ledger) addN(n int) uint64 {
	l.epochs[len(l.epochs)-1].pending += n
	l.total += n
	return l.current()
}

// doneN discharges n events of epoch.
func (l *ledger) doneN(epoch uint64, n int) {
	l.epochs[epoch-l.base].pending -= n
	l.total -= n
	// Retire finished epochs from the front; the current one stays.
	for len(l.epochs) > 1 && l.epochs[0].pending == 0 {
		if l.epochs[0].done != nil {
			close(l.epochs[0].done)
		}
		l.epochs[0] = epochCount{}
		l.epochs = l.epochs[1:]
		l.base++
	}
}

// mark returns a channel closed when every event counted so far has been
// discharged, or nil when none is outstanding.
func (l *ledger) mark() <-chan struct{} {
	if l.total == 0 {
		return nil
	}
	last := len(l.epochs) - 1
	if l.epochs[last].pending == 0 {
		// Nothing since the last mark: wait with it (last >= 1 here,
		// since total > 0 and the current epoch is empty).
		last--
	} else {
		l.epochs = append(l.epochs, epochCount{})
	}
	e := &l.epochs[last]
	if e.done == nil {
		e.done = make(chan struct{})
	}
	return e.done
}

// flushedSince reports whether a Flush or Close was asked for after epoch
// began.
func (l *ledger) flushedSince(epoch uint64) bool { return epoch < l.current() }

// epochRun is a run of events accepted in the same ledger epoch that
// were counted without being queued (durable mode: on disk only, see
// queue.account).
type epochRun struct {
	epoch uint64
	n     int64
}
