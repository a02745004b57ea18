package embedded

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/http"
	"slices"
	"time"

	"github.com/idemgate/idemgate/store"
)

// The journal and the snapshots are sequences of frames:
//
//	uint32 length (little endian) | uint32 CRC-32C of the payload | payload
//
// A payload is an op byte and its fields: strings and byte strings as a
// uvarint length and the bytes, integers as varints. Every op sets
// absolute values, so replaying an op twice leaves the same state.
const (
	opPut     byte = 1 // the whole record (every state change)
	opAttempt byte = 2 // id, attempts: a claim that only counted
	opRenew   byte = 3 // id, lease_until: a renewed lease

	// opTomb starts a record key's value once its record expired and
	// only its tombstone is left (retention.go); never in a journal.
	opTomb byte = 4
)

const frameHeader = 8

// maxFrame bounds one frame's payload (a record with its stored body).
const maxFrame = 1 << 30

var crcTable = crc32.MakeTable(crc32.Castagnoli)

var errBadFrame = errors.New("bad frame")

// nextFrame splits the first frame's payload off b; ok is false for a
// short or damaged frame (a torn write).
func nextFrame(b []byte) (payload, rest []byte, ok bool) {
	if len(b) < frameHeader {
		return nil, b, false
	}
	n := binary.LittleEndian.Uint32(b)
	if n > maxFrame || uint64(len(b)-frameHeader) < uint64(n) {
		return nil, b, false
	}
	payload = b[frameHeader : frameHeader+int(n)]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(b[4:]) {
		return nil, b, false
	}
	return payload, b[frameHeader+int(n):], true
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// appendHeader appends h in the stored form (store.EncodeHeader) as
// appendString would, encoded straight into b: its length goes in
// front once it is known.
func appendHeader(b []byte, h http.Header) []byte {
	start := len(b)
	b = store.AppendHeader(b, h)
	var n [binary.MaxVarintLen64]byte
	return slices.Insert(b, start, n[:binary.PutUvarint(n[:], uint64(len(b)-start))]...)
}

func appendBytes(b []byte, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte { return binary.AppendVarint(b, store.MillisOf(t)) }

// State bytes.
var stateCodes = map[store.State]byte{
	store.StateInFlight: 1, store.StateCompleted: 2, store.StateUnknown: 3, store.StateReleased: 4,
}

var codeStates = [...]store.State{0: "", 1: store.StateInFlight, 2: store.StateCompleted, 3: store.StateUnknown, 4: store.StateReleased}

// appendPut encodes a whole record.
func appendPut(b []byte, r *rec) []byte {
	b = append(b, opPut)
	b = appendString(b, r.ID)
	b = append(b, stateCodes[r.State])
	b = appendString(b, r.Token)
	b = appendString(b, r.Route)
	b = appendString(b, r.Operation)
	b = appendString(b, r.Fingerprint)
	b = appendString(b, r.FingerprintRule)
	b = appendTime(b, r.StartedAt)
	b = appendTime(b, r.CompletedAt)
	b = appendTime(b, r.LeaseUntil)
	b = binary.AppendVarint(b, r.Attempts)
	b = binary.AppendVarint(b, r.Executions)
	b = binary.AppendVarint(b, int64(r.Status))
	b = appendHeader(b, r.Header)
	b = appendBytes(b, r.Body)
	if r.BodyOmitted {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = appendString(b, r.Digest)
	b = appendString(b, r.ExternalID)
	b = appendString(b, r.Reason)
	b = binary.AppendVarint(b, r.ExpireAt)
	b = binary.AppendUvarint(b, uint64(len(r.Audit)))
	for _, a := range r.Audit {
		b = appendTime(b, a.At)
		b = appendString(b, a.Actor)
		b = appendString(b, a.Action)
		b = appendString(b, a.Reason)
	}
	return appendChecks(b, r)
}

// appendChecks encodes a record's verification fields, a trailing section
// that records made before verification lack.
func appendChecks(b []byte, r *rec) []byte {
	b = appendString(b, r.Check.Method)
	b = appendString(b, r.Check.URL)
	b = binary.AppendVarint(b, r.Check.After.Milliseconds())
	b = binary.AppendUvarint(b, uint64(len(r.Checks)))
	for _, c := range r.Checks {
		b = appendTime(b, c.At)
		b = binary.AppendVarint(b, int64(c.Status))
		b = appendString(b, c.Verdict)
	}
	b = binary.AppendVarint(b, r.CheckCount)
	b = appendTime(b, r.NextCheck)
	b = binary.AppendVarint(b, r.NotFoundStreak)
	b = binary.AppendVarint(b, r.NotFoundAt)
	b = appendString(b, r.CheckToken)
	b = appendTime(b, r.CheckLeaseUntil)
	b = appendString(b, store.EncodeCheckMatch(r.Check.Match))
	return appendRecovery(b, r)
}

// appendRecovery encodes a record's recovery fields, a trailing section
// that records made before the retry budget lack (and Unknowns, last,
// those made before unknown outcomes counted against it).
func appendRecovery(b []byte, r *rec) []byte {
	b = binary.AppendVarint(b, r.NotDone)
	b = binary.AppendUvarint(b, uint64(len(r.Answers)))
	for _, a := range r.Answers {
		b = appendTime(b, a.At)
		b = binary.AppendVarint(b, int64(a.Status))
	}
	b = appendBytes(b, r.Request)
	return binary.AppendVarint(b, r.Unknowns)
}

// decodeRecovery is the inverse of appendRecovery; nothing when the
// payload ends before it.
func decodeRecovery(d *reader, r *rec) {
	if len(d.b) == 0 {
		return
	}
	r.NotDone = d.varint()
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.Answers = append(r.Answers, store.Answer{At: store.TimeOfMillis(d.varint()), Status: int(d.varint())})
	}
	if req := d.bytes(); len(req) > 0 {
		r.Request = append([]byte(nil), req...)
	}
	if len(d.b) > 0 { // records made before unknown outcomes counted lack it
		r.Unknowns = d.varint()
	}
}

// decodeChecks is the inverse of appendChecks; nothing when the payload
// ends before it.
func decodeChecks(d *reader, r *rec) {
	if len(d.b) == 0 {
		return
	}
	r.Check = store.Check{Method: d.string(), URL: d.string()}
	r.Check.After = time.Duration(d.varint()) * time.Millisecond
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.Checks = append(r.Checks, store.CheckEntry{At: store.TimeOfMillis(d.varint()), Status: int(d.varint()), Verdict: d.string()})
	}
	r.CheckCount = d.varint()
	r.NextCheck = store.TimeOfMillis(d.varint())
	r.NotFoundStreak = d.varint()
	r.NotFoundAt = d.varint()
	r.CheckToken = d.string()
	r.CheckLeaseUntil = store.TimeOfMillis(d.varint())
	if len(d.b) > 0 { // records made before match values lack them
		r.Check.Match = store.DecodeCheckMatch(d.string())
	}
	decodeRecovery(d, r)
}

// reader decodes one payload; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (d *reader) fail() {
	if d.err == nil {
		d.err = errBadFrame
	}
	d.b = nil
}

func (d *reader) byte() byte {
	if len(d.b) < 1 {
		d.fail()
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *reader) bytes() []byte {
	n, k := binary.Uvarint(d.b)
	if k <= 0 || uint64(len(d.b)-k) < n {
		d.fail()
		return nil
	}
	s := d.b[k : k+int(n)]
	d.b = d.b[k+int(n):]
	return s
}

func (d *reader) string() string { return string(d.bytes()) }

func (d *reader) varint() int64 {
	v, k := binary.Varint(d.b)
	if k <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[k:]
	return v
}

func (d *reader) uvarint() uint64 {
	v, k := binary.Uvarint(d.b)
	if k <= 0 {
		d.fail()
		return 0
	}
	d.b = d.b[k:]
	return v
}

// decodePut is the inverse of appendPut (after the op byte).
func decodePut(d *reader) (*rec, error) {
	r := &rec{}
	r.ID = d.string()
	st := d.byte()
	if int(st) >= len(codeStates) || st == 0 {
		d.fail()
	} else {
		r.State = codeStates[st]
	}
	r.Token = d.string()
	r.Route = d.string()
	r.Operation = d.string()
	r.Fingerprint = d.string()
	r.FingerprintRule = d.string()
	r.StartedAt = store.TimeOfMillis(d.varint())
	r.CompletedAt = store.TimeOfMillis(d.varint())
	r.LeaseUntil = store.TimeOfMillis(d.varint())
	r.Attempts = d.varint()
	r.Executions = d.varint()
	r.Status = int(d.varint())
	r.Header = store.DecodeHeader(d.string())
	if body := d.bytes(); len(body) > 0 {
		r.Body = append([]byte(nil), body...)
	}
	r.BodyOmitted = d.byte() == 1
	r.Digest = d.string()
	r.ExternalID = d.string()
	r.Reason = d.string()
	r.ExpireAt = d.varint()
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail()
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		r.Audit = append(r.Audit, store.AuditEntry{
			At: store.TimeOfMillis(d.varint()), Actor: d.string(), Action: d.string(), Reason: d.string(),
		})
	}
	decodeChecks(d, r)
	if d.err != nil || !store.ValidID(r.ID) {
		return nil, errBadFrame
	}
	return r, nil
}

// encodeRecord is a record's stored value: opPut and its fields, then
// the tombstone it leaves or carries (a trailing section, absent when
// there is none: records made before tombstones lack it), then the tool
// call that claimed it (store.EncodeToolCall; absent when there is none,
// and then the tombstone section is written as none to come before it).
func encodeRecord(r *rec, t tomb) []byte {
	return appendRecord(make([]byte, 0, 256+len(r.Body)), r, t)
}

// appendRecord appends encodeRecord(r, t) to b.
func appendRecord(b []byte, r *rec, t tomb) []byte {
	b = appendPut(b, r)
	if t.until == 0 && r.Call == nil {
		return b
	}
	b = appendTomb(b, t)
	if r.Call == nil {
		return b
	}
	return appendBytes(b, store.EncodeToolCall(r.Call))
}

// decodeRecord is the inverse of encodeRecord.
func decodeRecord(v []byte) (*rec, tomb, error) {
	if len(v) == 0 || v[0] != opPut {
		return nil, tomb{}, errBadFrame
	}
	d := &reader{b: v[1:]}
	r, err := decodePut(d)
	if err != nil || len(d.b) == 0 {
		return r, tomb{}, err
	}
	t := decodeTomb(d)
	if d.err == nil && len(d.b) > 0 { // records made before tool calls were kept lack it
		if call := d.bytes(); len(call) == 0 {
			d.fail() // never written empty
		} else {
			r.Call = store.DecodeToolCall(call)
		}
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, tomb{}, errBadFrame
	}
	return r, t, nil
}

// encodeTomb is the value of a record key that holds only a tombstone.
func encodeTomb(t tomb) []byte { return appendTomb([]byte{opTomb}, t) }

// decodeValue decodes a record key's value: a record with the tombstone
// it carries, or a tombstone alone (nil record).
func decodeValue(v []byte) (*rec, tomb, error) {
	if len(v) == 0 || v[0] != opTomb {
		return decodeRecord(v)
	}
	d := &reader{b: v[1:]}
	t := decodeTomb(d)
	if d.err != nil || len(d.b) != 0 || t.until == 0 {
		return nil, tomb{}, errBadFrame
	}
	return nil, t, nil
}

// appendTomb encodes a tombstone: its end, completed at and status as
// varints, the reason.
func appendTomb(b []byte, t tomb) []byte {
	b = binary.AppendVarint(b, t.until)
	b = binary.AppendVarint(b, t.completedAt)
	b = binary.AppendVarint(b, int64(t.status))
	return appendString(b, t.reason)
}

// decodeTomb is the inverse of appendTomb.
func decodeTomb(d *reader) tomb {
	return tomb{until: d.varint(), completedAt: d.varint(), status: int(d.varint()), reason: d.string()}
}
