package embedded

// WALSyncs is how many durable writes e began and how many fdatasyncs of
// its log files it ran.
func WALSyncs(e *Engine) (durables, fsyncs int64) {
	return e.wal.durables.Load(), e.wal.fsyncs.Load()
}
