package lease

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
)

// The record of a local key lives in its lock file, in two slots:
//
//	offset 0:    slot 0 (slotLen bytes)
//	offset 4096: slot 1 (slotLen bytes)
//
// Write number n (n = 1, 2, …) goes to slot (n-1)%2, so each write
// overwrites the older of the two records and never the newest one. A slot
// holds:
//
//	magic "LKR1" | seq u64 | epoch u64 | flags u8 | key len u16 | owner len u16 | key | owner | zeros | crc32c u32
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
// The reader also refuses a file of any size but 0 and recFileLen, and two
// valid slots whose write numbers are not consecutive: no crash leaves
// those. What the format cannot tell apart: a crash during the very first
// write of a key (no grant was returned yet) can leave a file that is
// short or fails both checksums; it reads as ErrCorrupt, as a record
// damaged later would (R10: fail closed). An empty file is a key that was
// never written.
const (
	slotLen    = 1024                  // bytes per slot; fits the longest key and owner
	slotStride = 4096                  // offset of slot 1: the slots never share a page
	recFileLen = slotStride + slotLen  // size of every lock file that has a record
	slotHeader = 4 + 8 + 8 + 1 + 2 + 2 // magic, seq, epoch, flags, key and owner lengths
	slotMagic  = "LKR1"
	flagFreed  = 1 // the record is released
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// encodeSlot lays out record rec as write number seq.
func encodeSlot(seq uint64, rec Record) []byte {
	b := make([]byte, slotLen)
	copy(b, slotMagic)
	binary.BigEndian.PutUint64(b[4:], seq)
	binary.BigEndian.PutUint64(b[12:], rec.Epoch)
	if rec.Released {
		b[20] = flagFreed
	}
	binary.BigEndian.PutUint16(b[21:], uint16(len(rec.Key)))
	binary.BigEndian.PutUint16(b[23:], uint16(len(rec.Owner)))
	n := copy(b[slotHeader:], rec.Key)
	copy(b[slotHeader+n:], rec.Owner)
	binary.BigEndian.PutUint32(b[slotLen-4:], crc32.Checksum(b[:slotLen-4], castagnoli))
	return b
}

// decodeSlot parses one slot; ok is false when it holds no valid record.
func decodeSlot(b []byte) (seq uint64, rec Record, ok bool) {
	if len(b) != slotLen || string(b[:4]) != slotMagic ||
		crc32.Checksum(b[:slotLen-4], castagnoli) != binary.BigEndian.Uint32(b[slotLen-4:]) {
		return 0, Record{}, false
	}
	seq = binary.BigEndian.Uint64(b[4:])
	keyLen := int(binary.BigEndian.Uint16(b[21:]))
	ownerLen := int(binary.BigEndian.Uint16(b[23:]))
	if slotHeader+keyLen+ownerLen > slotLen-4 || b[20]&^flagFreed != 0 {
		return 0, Record{}, false
	}
	rec = Record{
		Key:      string(b[slotHeader : slotHeader+keyLen]),
		Owner:    string(b[slotHeader+keyLen : slotHeader+keyLen+ownerLen]),
		Epoch:    binary.BigEndian.Uint64(b[12:]),
		Released: b[20]&flagFreed != 0,
	}
	return seq, rec, true
}

// slotOffset is where write number seq goes.
func slotOffset(seq uint64) int64 { return int64((seq - 1) % 2 * slotStride) }

// readRecord reads key's record from f. It returns nil and seq 0 for an
// empty file (never written), and an error matching ErrCorrupt for anything
// no store could have written (R10).
func readRecord(f *os.File, key string) (rec *Record, seq uint64, err error) {
	buf := make([]byte, recFileLen+1) // one byte more, to see a file that is too long
	n, err := preadOnce(f, buf)
	if err != nil {
		return nil, 0, corrupt("cannot read lock file: %w", err)
	}
	switch n {
	case 0:
		return nil, 0, nil
	case recFileLen:
	default:
		return nil, 0, corrupt("lock file is %d bytes, want 0 or %d", n, recFileLen)
	}
	seq0, rec0, ok0 := decodeSlot(buf[:slotLen])
	seq1, rec1, ok1 := decodeSlot(buf[slotStride : slotStride+slotLen])
	ok0 = ok0 && seq0 > 0 && slotOffset(seq0) == 0
	ok1 = ok1 && seq1 > 0 && slotOffset(seq1) == slotStride
	switch {
	case ok0 && ok1 && seq0 != seq1+1 && seq1 != seq0+1:
		return nil, 0, corrupt("slots hold writes %d and %d, want consecutive", seq0, seq1)
	case ok0 && (!ok1 || seq0 > seq1):
		seq, rec = seq0, &rec0
	case ok1:
		seq, rec = seq1, &rec1
	default:
		return nil, 0, corrupt("no slot holds a valid record")
	}
	if err := checkRecord(*rec, key); err != nil {
		return nil, 0, err
	}
	return rec, seq, nil
}

// writeRecord stores rec as write number seq and makes it durable. The
// first write (seq 1) lays out the whole file; later ones overwrite one
// slot in place.
func writeRecord(f *os.File, seq uint64, rec Record) error {
	b := encodeSlot(seq, rec)
	off := slotOffset(seq)
	if seq == 1 {
		whole := make([]byte, recFileLen)
		copy(whole, b)
		b = whole
	}
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	if err := datasync(f); err != nil {
		return fmt.Errorf("fdatasync: %w", err)
	}
	return nil
}
