package localfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
)

// The record of a local key lives in its lock file, in two slots:
//
//	offset 0:    slot 0 (SlotLen bytes)
//	offset 4096: slot 1 (SlotLen bytes)
//
// Write number n (n = 1, 2, …) goes to slot (n-1)%2, so each write
// overwrites the older of the two records and never the newest one. A slot
// holds:
//
//	magic "LKR1" | seq u64 | epoch u64 | flags u8 | key len u16 | owner len u16 | key | owner | [hand-off] | zeros | crc32c u32
//
// A released record that Held.Handoff wrote has flagHanded too, and after
// the owner: next owner len u16 | next owner | until (Unix ns) i64: the key
// is reserved for the next owner until then.
//
// The checksum covers everything before it. The first write of a key
// writes the whole file (slot 0 and a zero slot 1) so that every later write
// is an in-place overwrite of a fixed-size region that never changes the
// file's size; each write is made durable with one fdatasync.
//
// Why a crash at any point leaves the old state or the new one: before
// write n+1 the file holds record n (the newest valid slot) and record n-1
// or nothing in the other slot. Write n+1 touches only that other slot. A
// crash before its fdatasync returns leaves that slot with its old bytes,
// its new bytes, or a mix. Old bytes carry seq n-1 (or are invalid), so
// slot n stays the newest: the old state. New bytes carry seq n+1: the new
// state. A mix fails its checksum (CRC-32C: a torn slot passes by chance
// with odds of 1 in 2^32) and is ignored: the old state. Slot n is
// never written during write n+1, and the two slots sit in different 4 KiB
// pages (and so different sectors on any common device) so tearing one
// cannot damage the other. The new state is returned to a caller only after
// fdatasync, so a grant or release the caller saw is never rolled back (R2,
// R7).
//
// A lock file never exists without a valid slot: it is created whole, by
// writing it under a temporary name, making it durable and linking it into
// place (see createLockFile), holding write number 1 in slot 0: an
// "absent" marker that names the key and no holder (flagAbsent, epoch 0, no
// owner). The first grant is write 2. So a missing file is a key never
// written, and an empty, short or headerless file is damage (R10), which
// the store refuses and never overwrites. Files written by older versions,
// whose write 1 is already a grant, read the same way.
//
// The reader also refuses a file of any size but FileLen, two valid
// slots whose write numbers are not consecutive, a newer slot whose epoch
// is lower than the older one's, and an absent marker anywhere but write 1:
// no crash leaves those.
const (
	SlotLen    = 1024                  // bytes per slot; fits the longest key and owner
	SlotStride = 4096                  // offset of slot 1: the slots never share a page
	FileLen    = SlotStride + SlotLen  // size of every lock file that has a record
	slotHeader = 4 + 8 + 8 + 1 + 2 + 2 // magic, seq, epoch, flags, key and owner lengths
	slotMagic  = "LKR1"
	flagFreed  = 1 // the record is released
	flagAbsent = 2 // write 1 of a new file: the key was never acquired
	flagHanded = 4 // with flagFreed: released reserved for Next until Until
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Record is a key's record as a slot holds it: lease.Record without the
// expiry, which local grants do not have.
type Record struct {
	Key      string
	Owner    string
	Epoch    uint64
	Released bool
	Next     string // a released record's reserved next owner (Handoff); "" for none
	Until    int64  // when Next's reservation ends, in Unix nanoseconds
}

// EncodeSlot lays out record rec as write number seq.
func EncodeSlot(seq uint64, rec Record) []byte {
	b := make([]byte, SlotLen)
	copy(b, slotMagic)
	binary.BigEndian.PutUint64(b[4:], seq)
	binary.BigEndian.PutUint64(b[12:], rec.Epoch)
	if rec.Released {
		b[20] = flagFreed
	}
	if rec.Epoch == 0 && rec.Owner == "" { // the absent marker (see AbsentRecord)
		b[20] = flagAbsent
	}
	binary.BigEndian.PutUint16(b[21:], uint16(len(rec.Key)))
	binary.BigEndian.PutUint16(b[23:], uint16(len(rec.Owner)))
	n := copy(b[slotHeader:], rec.Key)
	n += copy(b[slotHeader+n:], rec.Owner)
	if rec.Released && rec.Next != "" {
		b[20] |= flagHanded
		rest := b[slotHeader+n:]
		binary.BigEndian.PutUint16(rest, uint16(len(rec.Next)))
		m := 2 + copy(rest[2:], rec.Next)
		binary.BigEndian.PutUint64(rest[m:], uint64(rec.Until))
	}
	binary.BigEndian.PutUint32(b[SlotLen-4:], crc32.Checksum(b[:SlotLen-4], castagnoli))
	return b
}

// DecodeSlot parses one slot; ok is false when it holds no valid record.
func DecodeSlot(b []byte) (seq uint64, rec Record, ok bool) {
	if len(b) != SlotLen || string(b[:4]) != slotMagic ||
		crc32.Checksum(b[:SlotLen-4], castagnoli) != binary.BigEndian.Uint32(b[SlotLen-4:]) {
		return 0, Record{}, false
	}
	seq = binary.BigEndian.Uint64(b[4:])
	keyLen := int(binary.BigEndian.Uint16(b[21:]))
	ownerLen := int(binary.BigEndian.Uint16(b[23:]))
	end := slotHeader + keyLen + ownerLen
	if end > SlotLen-4 || (b[20] != 0 && b[20] != flagFreed && b[20] != flagAbsent && b[20] != flagFreed|flagHanded) {
		return 0, Record{}, false
	}
	rec = Record{
		Key:      string(b[slotHeader : slotHeader+keyLen]),
		Owner:    string(b[slotHeader+keyLen : end]),
		Epoch:    binary.BigEndian.Uint64(b[12:]),
		Released: b[20]&flagFreed != 0,
	}
	if b[20]&flagHanded != 0 {
		if end+2 > SlotLen-4 {
			return 0, Record{}, false
		}
		nextLen := int(binary.BigEndian.Uint16(b[end:]))
		if nextLen == 0 || end+2+nextLen+8 > SlotLen-4 {
			return 0, Record{}, false
		}
		rec.Next = string(b[end+2 : end+2+nextLen])
		rec.Until = int64(binary.BigEndian.Uint64(b[end+2+nextLen:]))
	}
	return seq, rec, true
}

// SlotOffset is where write number seq goes.
func SlotOffset(seq uint64) int64 { return int64((seq - 1) % 2 * SlotStride) }

// AbsentRecord is the record a new lock file holds as write 1: key, and
// no holder. EncodeSlot marks it with flagAbsent.
func AbsentRecord(key string) Record { return Record{Key: key} }

// isAbsent reports whether a decoded slot is the absent marker.
func isAbsent(b []byte) bool { return b[20] == flagAbsent }

// ReadRecord reads key's record from f. It returns nil and seq 1 for a
// file that holds only its absent marker (created, never acquired), and a
// CorruptError for anything no store could have written (R10), including
// an empty file. The owner's spelling is the caller's to check.
func ReadRecord(f *os.File, key string) (rec *Record, seq uint64, err error) {
	file, err := ReadWhole(f)
	if mutant == mutantEmptyAbsent && errors.Is(err, errEmpty) {
		return nil, 0, nil // read an empty lock file as a key never written
	}
	if err != nil {
		return nil, 0, err
	}
	return ParseRecord(file, key)
}

// errEmpty is the cause of the CorruptError of an empty lock file.
var errEmpty = errors.New("lock file is 0 bytes")

// ReadWhole reads a lock file's bytes, FileLen of them, in one read; a
// file of any other size is a CorruptError.
func ReadWhole(f *os.File) ([]byte, error) {
	buf := make([]byte, FileLen+1) // one byte more, to see a file that is too long
	n, err := PreadOnce(f, buf)
	switch {
	case err != nil:
		return nil, corrupt("cannot read lock file: %w", err)
	case n == 0:
		return nil, corrupt("%w, want %d", errEmpty, FileLen)
	case n != FileLen:
		return nil, corrupt("lock file is %d bytes, want %d", n, FileLen)
	}
	return buf[:FileLen], nil
}

// SlotKey returns the key that the newest valid slot of a whole lock file
// names, for a reader that knows the file but not the key.
func SlotKey(file []byte) (string, error) {
	seq0, rec0, ok0 := DecodeSlot(file[:SlotLen])
	seq1, rec1, ok1 := DecodeSlot(file[SlotStride : SlotStride+SlotLen])
	switch {
	case ok0 && (!ok1 || seq0 > seq1):
		return rec0.Key, nil
	case ok1:
		return rec1.Key, nil
	}
	return "", corrupt("no slot holds a valid record")
}

// ParseRecord reads key's record from a whole lock file's bytes: nil and
// seq 1 for an absent marker, a CorruptError for bytes no store writes.
func ParseRecord(file []byte, key string) (rec *Record, seq uint64, err error) {
	s0, s1 := file[:SlotLen], file[SlotStride:SlotStride+SlotLen]
	seq0, rec0, ok0 := DecodeSlot(s0)
	seq1, rec1, ok1 := DecodeSlot(s1)
	ok0 = ok0 && seq0 > 0 && SlotOffset(seq0) == 0
	ok1 = ok1 && seq1 > 0 && SlotOffset(seq1) == SlotStride
	newest := s0
	switch {
	case ok0 && ok1 && seq0 != seq1+1 && seq1 != seq0+1:
		return nil, 0, corrupt("slots hold writes %d and %d, want consecutive", seq0, seq1)
	case ok0 && ok1 && seq0 > seq1 && rec0.Epoch < rec1.Epoch, ok0 && ok1 && seq1 > seq0 && rec1.Epoch < rec0.Epoch:
		return nil, 0, corrupt("epoch went down from %d to %d", max(rec0.Epoch, rec1.Epoch), min(rec0.Epoch, rec1.Epoch))
	case ok0 && (!ok1 || seq0 > seq1):
		seq, rec = seq0, &rec0
	case ok1:
		seq, rec, newest = seq1, &rec1, s1
	default:
		return nil, 0, corrupt("no slot holds a valid record")
	}
	if isAbsent(newest) {
		switch {
		case seq != 1:
			return nil, 0, corrupt("absent marker at write %d, want 1", seq)
		case rec.Key != key:
			return nil, 0, corrupt("record for key %q stored under %q", rec.Key, key)
		case rec.Epoch != 0 || rec.Owner != "" || rec.Released:
			return nil, 0, corrupt("absent marker names a holder")
		}
		return nil, 1, nil
	}
	switch {
	case rec.Key != key:
		return nil, 0, corrupt("record for key %q stored under %q", rec.Key, key)
	case rec.Epoch == 0:
		return nil, 0, corrupt("epoch 0")
	}
	return rec, seq, nil
}

// WriteRecord stores rec as write number seq and makes it durable. The
// first write (seq 1) lays out the whole file; later ones overwrite one
// slot in place.
func WriteRecord(f *os.File, seq uint64, rec Record) error {
	b := EncodeSlot(seq, rec)
	off := SlotOffset(seq)
	if seq == 1 {
		whole := make([]byte, FileLen)
		copy(whole, b)
		b = whole
	}
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	if err := Datasync(f); err != nil {
		return fmt.Errorf("fdatasync: %w", err)
	}
	return nil
}
