package cpu

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// heapObjects is the Go heap's live-and-unswept object bytes.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// residentBytes reads the process's resident set size from /proc/self/statm (Linux only).
func residentBytes(t *testing.T) (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	require.GreaterOrEqual(t, len(f), 2)
	pages, err := strconv.ParseInt(f[1], 10, 64)
	require.NoError(t, err)
	return pages * int64(os.Getpagesize()), true
}

var churnSink []byte

// TestKVCacheOutsideGoHeap fills a 256 MiB cache, then allocates as much garbage again in
// small pieces, as serving requests does. Were the cache on the Go heap, GOGC=100 would let
// the heap grow to twice the cache before collecting, and the resident size would approach
// 512 MiB; outside the heap the garbage is collected against a heap of a few MB and the
// resident size stays near the cache's size.
func TestKVCacheOutsideGoHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const mib = 1 << 20
	const layers, blocks, blockSize, kvHeads, headDim = 16, 256, 16, 8, 64
	const cacheBytes = 2 * layers * blocks * blockSize * kvHeads * headDim * 4
	require.Equal(t, 256*mib, cacheBytes)
	runtime.GC()
	heap0 := heapObjects()
	rss0, haveRSS := residentBytes(t)

	b := New(1)
	defer b.Close()
	c, err := b.NewKVCache(layers, blocks, blockSize, kvHeads, headDim)
	require.NoError(t, err)
	kv := c.(*KVCache)
	for l := range kv.k {
		for i := range kv.k[l] {
			kv.k[l][i], kv.v[l][i] = float32(i%97), float32(l)
		}
	}
	pattern := make([]byte, mib)
	for i := range pattern {
		pattern[i] = byte(i | 1)
	}
	for range 256 { // written garbage: fresh pages that are never touched are not resident
		churnSink = make([]byte, mib)
		copy(churnSink, pattern)
	}
	churnSink = nil
	runtime.GC()
	require.Less(t, heapObjects(), heap0+16*mib, "the KV cache must not be on the Go heap")
	require.Equal(t, float32(40%97), kv.k[3][40])
	require.Equal(t, float32(15), kv.v[15][len(kv.v[15])-1])
	if !haveRSS {
		t.Skip("no /proc/self/statm: resident size not checked")
	}
	rss, _ := residentBytes(t)
	grown := rss - rss0
	t.Logf("resident size grew by %d MiB for a %d MiB cache", grown/mib, cacheBytes/mib)
	require.Greater(t, grown, int64(cacheBytes*9/10), "the filled cache is resident")
	require.Less(t, grown, int64(cacheBytes+64*mib), "resident size is the cache plus a bounded working set, not twice the cache")

	kv.Close()
	kv.Close() // idempotent
	rss, _ = residentBytes(t)
	require.Less(t, rss-rss0, int64(64*mib), "Close returns the cache's memory")
}

func TestBackendCloseReleasesKVCaches(t *testing.T) {
	b := New(1)
	for range 3 {
		_, err := b.NewKVCache(2, 4, 4, 2, 8)
		require.NoError(t, err)
	}
	require.Len(t, b.kv, 3)
	b.Close()
	require.Empty(t, b.kv)
}

func TestKVCacheGeometryOverflow(t *testing.T) {
	b := New(1)
	defer b.Close()
	_, err := b.NewKVCache(1<<20, 1<<30, 1<<10, 1<<10, 1<<10)
	require.ErrorContains(t, err, "overflow the address space")
}
