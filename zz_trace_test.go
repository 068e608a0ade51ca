package lease

import (
	"os"
	"runtime/pprof"
	"testing"
	"time"
)

func BenchmarkZZProfile(b *testing.B) {
	for _, backend := range manyBackends {
		if backend.name != os.Getenv("ZZ_BACKEND") {
			continue
		}
		rig := backend.open(b, 100000)
		s, err := NewDocumentStore(rig.d, WithOwner("bench"), WithTTL(rig.ttl))
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		holdAllAtOnce(b, s, profileKeys(100000), os.Getenv("ZZ_CONC") != "")
		time.Sleep(rig.ttl / 3)
		f, _ := os.Create("/tmp/exp/steady.prof")
		pprof.StartCPUProfile(f)
		c0 := processCPU()
		time.Sleep(30 * time.Second)
		pprof.StopCPUProfile()
		b.ReportMetric(100*float64(processCPU()-c0)/float64(30*time.Second), "cpu-%")
	}
}
