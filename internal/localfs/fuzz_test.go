package localfs

import (
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// Fuzzing the local store's record reader (R2, R10): whatever bytes a lock
// file holds, reading it never panics, never returns a record for another
// key, and never returns an epoch lower than a valid slot of the file holds.
// The seed corpora are under testdata/fuzz and run with every `go test`.

// checkParsed checks ParseRecord's answer for key over a whole file.
func checkParsed(t *testing.T, file []byte, key string) {
	rec, seq, err := ParseRecord(file, key)
	if err != nil {
		return
	}
	if rec == nil {
		if seq != 1 {
			t.Fatalf("no record at write %d; only a new file (write 1) has none", seq)
		}
	} else {
		if rec.Key != key {
			t.Fatalf("asked for %q, got a record for %q", key, rec.Key)
		}
		if rec.Epoch == 0 { // the owner's spelling is package lease's to check
			t.Fatalf("returned a record no store could write: %+v", *rec)
		}
	}
	for _, off := range []int{0, SlotStride} {
		s, r, ok := DecodeSlot(file[off : off+SlotLen])
		if !ok || s == 0 || SlotOffset(s) != int64(off) {
			continue
		}
		if rec == nil && !isAbsent(file[off:off+SlotLen]) {
			t.Fatalf("reported a new file, but the slot at %d holds write %d, epoch %d", off, s, r.Epoch)
		}
		if rec != nil && r.Epoch > rec.Epoch {
			t.Fatalf("returned epoch %d, but the slot at %d holds epoch %d", rec.Epoch, off, r.Epoch)
		}
	}
}

// lockFile lays out a lock file from two slot images, each cut or padded
// with zeros to a slot's length. When sealed, each slot's checksum is made
// valid, so that short inputs reach every check behind it (the fuzzer
// minimises and mutates short inputs far faster than whole files).
func lockFile(slot0, slot1 []byte, sealed bool) []byte {
	file := make([]byte, FileLen)
	for i, img := range [][]byte{slot0, slot1} {
		s := file[i*SlotStride : i*SlotStride+SlotLen]
		copy(s, img)
		if sealed {
			binary.BigEndian.PutUint32(s[SlotLen-4:], crc32.Checksum(s[:SlotLen-4], castagnoli))
		}
	}
	return file
}

// FuzzLocalRecord reads any bytes as a lock file's two slots.
func FuzzLocalRecord(f *testing.F) {
	absent := EncodeSlot(1, AbsentRecord("k"))[:slotHeader+1]
	f.Add(absent, []byte{}, true, "k")
	f.Add(absent, EncodeSlot(2, Record{Key: "k", Owner: "a", Epoch: 1})[:slotHeader+2], true, "k")
	f.Fuzz(func(t *testing.T, slot0, slot1 []byte, sealed bool, key string) {
		DecodeSlot(slot0) // any length: never a panic
		file := lockFile(slot0, slot1, sealed)
		SlotKey(file)
		checkParsed(t, file, key)
	})
}

// rawSlot lays out a slot field by field, flags included, with a valid
// checksum, so that the fuzzer reaches the checks behind the checksum.
func rawSlot(seq, epoch uint64, flags byte, key, owner string) []byte {
	b := make([]byte, SlotLen)
	copy(b, slotMagic)
	binary.BigEndian.PutUint64(b[4:], seq)
	binary.BigEndian.PutUint64(b[12:], epoch)
	b[20] = flags
	key = key[:min(len(key), 400)]
	owner = owner[:min(len(owner), 400)]
	binary.BigEndian.PutUint16(b[21:], uint16(len(key)))
	binary.BigEndian.PutUint16(b[23:], uint16(len(owner)))
	n := copy(b[slotHeader:], key)
	copy(b[slotHeader+n:], owner)
	binary.BigEndian.PutUint32(b[SlotLen-4:], crc32.Checksum(b[:SlotLen-4], castagnoli))
	return b
}

// FuzzLocalSlots reads lock files made of two checksummed slots with any
// fields: write numbers, epochs, flags, keys and owners.
func FuzzLocalSlots(f *testing.F) {
	f.Add(uint64(1), uint64(0), byte(flagAbsent), "k", "", uint64(2), uint64(1), byte(0), "k", "a", "k")
	f.Add(uint64(3), uint64(2), byte(0), "k", "b", uint64(2), uint64(1), byte(flagFreed), "k", "a", "k")
	f.Fuzz(func(t *testing.T, seq0, epoch0 uint64, flags0 byte, key0, owner0 string,
		seq1, epoch1 uint64, flags1 byte, key1, owner1, key string) {
		file := make([]byte, FileLen)
		copy(file, rawSlot(seq0, epoch0, flags0, key0, owner0))
		copy(file[SlotStride:], rawSlot(seq1, epoch1, flags1, key1, owner1))
		SlotKey(file)
		checkParsed(t, file, key)
	})
}
