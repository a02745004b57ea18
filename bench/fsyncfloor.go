package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"syscall"
	"time"
)

// fsyncFloor is what one synced append costs on the filesystem the
// embedded store writes to: the floor of an execute on it, which syncs
// one claim (concurrent claims share the fsync).
type fsyncFloor struct {
	n        int
	p50, p99 time.Duration
	cpu      time.Duration // per append+fdatasync, this thread's utime+stime
}

// Sizes of the floor measurement: about a claim's log entry.
const (
	floorAppends = 2000
	floorBytes   = 300
)

// measureFsyncFloor appends floorBytes and fdatasyncs, n times, to a new
// file in dir, one at a time on a locked thread.
func measureFsyncFloor(dir string, n int) (fsyncFloor, error) {
	f, err := os.CreateTemp(dir, "fsync-floor-")
	if err != nil {
		return fsyncFloor{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := make([]byte, floorBytes)
	for i := range buf {
		buf[i] = byte('a' + i%26)
	}
	lat := make([]time.Duration, 0, n)
	before, err := threadCPU()
	if err != nil {
		return fsyncFloor{}, err
	}
	for range n {
		began := time.Now()
		if _, err := f.Write(buf); err != nil {
			return fsyncFloor{}, err
		}
		if err := syscall.Fdatasync(int(f.Fd())); err != nil {
			return fsyncFloor{}, err
		}
		lat = append(lat, time.Since(began))
	}
	after, err := threadCPU()
	if err != nil {
		return fsyncFloor{}, err
	}
	slices.Sort(lat)
	return fsyncFloor{
		n:   n,
		p50: lat[len(lat)/2],
		p99: lat[len(lat)*99/100],
		cpu: (after - before) / time.Duration(n),
	}, nil
}

// threadCPU is the calling thread's user and system time.
func threadCPU() (time.Duration, error) {
	const rusageThread = 1 // RUSAGE_THREAD
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		return 0, err
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// line is the report's line.
func (f fsyncFloor) line(dir string) string {
	if f.n == 0 {
		return ""
	}
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return fmt.Sprintf("fsync floor (%d × %d-byte append + fdatasync, one at a time, in the store's filesystem, %s): p50 %.3f ms, p99 %.3f ms, CPU %.0f µs each\n",
		f.n, floorBytes, dir, msOf(f.p50), msOf(f.p99), float64(f.cpu)/float64(time.Microsecond))
}
