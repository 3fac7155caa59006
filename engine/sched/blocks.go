package sched

import (
	"fmt"
	"slices"
)

// Prefix caching identifies a full block by a hash chained over its parent
// block's hash and its own tokens, so equal hashes mean equal token prefixes
// (up to collisions, which lookups guard against by comparing the tokens of
// the block itself). FNV-1a 64 is fixed (no per-process seed), so hashes are
// reproducible in tests and logs.
const (
	fnvOffset64 = 14695981039346656037
	fnvPrime64  = 1099511628211
	// rootHash is the parent of a sequence's first block.
	rootHash uint64 = 0x9e3779b97f4a7c15
)

// hashBlock returns FNV-1a 64 over the little-endian bytes of parent and
// then of every token.
func hashBlock(parent uint64, tokens []int32) uint64 {
	h := uint64(fnvOffset64)
	for i := 0; i < 64; i += 8 {
		h ^= (parent >> i) & 0xff
		h *= fnvPrime64
	}
	for _, t := range tokens {
		u := uint64(uint32(t))
		for i := 0; i < 32; i += 8 {
			h ^= (u >> i) & 0xff
			h *= fnvPrime64
		}
	}
	return h
}

// noBlock terminates the free queue links.
const noBlock int32 = -1

// blockMeta is the bookkeeping of one physical block.
type blockMeta struct {
	refCount int
	// hashed says the block is in the prefix cache under hash; tokens is a
	// copy of its tokens, compared on every hit so that a 64-bit hash
	// collision cannot hand a request someone else's KV.
	hashed bool
	hash   uint64
	tokens []int32
	// free says the block is in the free queue (exactly when refCount is 0);
	// prev and next link the queue.
	free       bool
	prev, next int32
}

// BlockManager owns the paged KV cache: numBlocks blocks of blockSize token
// slots, ids 0..numBlocks-1, with reference counts and prefix caching.
//
// Free blocks sit in one queue ordered by eviction priority, as in vLLM v1:
// allocation pops the head, freeing appends to the tail. A freed block keeps
// its hash, so it stays reusable by a later request with the same prefix
// until allocation reaches it; a hit takes it out of the queue. Because a
// freed sequence's blocks are appended last block first, the tail of a
// sequence (the part least likely to be shared) is evicted before its
// prefix.
//
// A BlockManager is not safe for concurrent use.
type BlockManager struct {
	blockSize     int
	prefixCaching bool
	blocks        []blockMeta
	head, tail    int32
	numFree       int
	// cache maps the hash of a full block to the block holding it. Every
	// block with hashed set is in it, and nothing else.
	cache map[uint64]int32
	// queries and hits count prompt tokens looked up at admission and the
	// tokens among them served by the cache.
	queries, hits int64
}

// NewBlockManager returns a manager of numBlocks free blocks of blockSize
// tokens each. It panics unless both are positive (Scheduler's New validates
// them first).
func NewBlockManager(numBlocks, blockSize int, prefixCaching bool) *BlockManager {
	if numBlocks <= 0 || blockSize <= 0 {
		panic(fmt.Sprintf("sched: NewBlockManager(%d, %d): block count and size must be positive", numBlocks, blockSize))
	}
	bm := &BlockManager{
		blockSize:     blockSize,
		prefixCaching: prefixCaching,
		blocks:        make([]blockMeta, numBlocks),
		head:          noBlock,
		tail:          noBlock,
		cache:         make(map[uint64]int32),
	}
	for id := range bm.blocks {
		bm.pushTail(int32(id))
	}
	return bm
}

// BlockSize returns the number of token slots per block.
func (bm *BlockManager) BlockSize() int { return bm.blockSize }

// NumBlocks returns the total number of blocks.
func (bm *BlockManager) NumBlocks() int { return len(bm.blocks) }

// NumFreeBlocks returns the number of blocks no sequence references,
// including cached ones, which allocation may evict.
func (bm *BlockManager) NumFreeBlocks() int { return bm.numFree }

// UsedBlocks returns the number of blocks referenced by some sequence.
func (bm *BlockManager) UsedBlocks() int { return len(bm.blocks) - bm.numFree }

// NumCachedBlocks returns the number of blocks in the prefix cache, in use
// or free.
func (bm *BlockManager) NumCachedBlocks() int { return len(bm.cache) }

// PrefixCacheQueries returns the number of tokens looked up in the prefix
// cache by successful admissions.
func (bm *BlockManager) PrefixCacheQueries() int64 { return bm.queries }

// PrefixCacheHits returns the number of looked-up tokens the cache served.
func (bm *BlockManager) PrefixCacheHits() int64 { return bm.hits }

// blocksFor returns the number of blocks holding n tokens.
func (bm *BlockManager) blocksFor(n int) int { return (n + bm.blockSize - 1) / bm.blockSize }

// ComputedPrefix returns the blocks of the prefix cache that already hold
// the leading tokens of seq, and how many tokens they cover. It changes
// nothing; pass the result to Admit.
//
// The prefix is capped at seq.Len()-1 tokens rounded down to a block, as in
// vLLM: at least the last token must be computed, otherwise the model would
// produce no logits to sample the next token from.
func (bm *BlockManager) ComputedPrefix(seq *Sequence) (blocks []int32, numTokens int) {
	if !bm.prefixCaching || seq.Len() == 0 {
		return nil, 0
	}
	bs := bm.blockSize
	for i, h := range seq.hashes((seq.Len()-1)/bs, bs) {
		id, ok := bm.cache[h]
		if !ok || !slices.Equal(bm.blocks[id].tokens, seq.TokenIDs[i*bs:(i+1)*bs]) {
			break
		}
		blocks = append(blocks, id)
	}
	return blocks, len(blocks) * bs
}

// CanAllocate reports whether Allocate(seq, numTokens) would succeed.
func (bm *BlockManager) CanAllocate(seq *Sequence, numTokens int) bool {
	return bm.blocksFor(numTokens)-len(seq.BlockTable) <= bm.numFree
}

// Allocate grows seq.BlockTable to hold numTokens tokens in total. It is all
// or nothing: when the free blocks do not suffice it changes nothing and
// returns false. Full blocks among the first numTokens tokens are registered
// in the prefix cache (see register).
func (bm *BlockManager) Allocate(seq *Sequence, numTokens int) bool {
	if !bm.CanAllocate(seq, numTokens) {
		return false
	}
	for len(seq.BlockTable) < bm.blocksFor(numTokens) {
		seq.BlockTable = append(seq.BlockTable, bm.popHead())
	}
	bm.register(seq, numTokens)
	return true
}

// Admit gives seq, which must hold no blocks, the cached blocks found by
// ComputedPrefix(seq) and then grows its table to numTokens tokens. All or
// nothing, like Allocate; cached blocks that sit in the free queue count
// against the free blocks, because taking them removes them from it. On
// success the lookup is counted in the hit-rate counters.
func (bm *BlockManager) Admit(seq *Sequence, cached []int32, numTokens int) bool {
	if len(seq.BlockTable) != 0 {
		panic(fmt.Sprintf("sched: Admit(%q): sequence already holds %d blocks", seq.ID, len(seq.BlockTable)))
	}
	revived := 0
	for i, id := range cached {
		b := &bm.blocks[id]
		// Guard against a stale lookup: the block must still hold block i.
		if !b.hashed || b.hash != seq.hashes(i+1, bm.blockSize)[i] {
			panic(fmt.Sprintf("sched: Admit(%q): cached block %d no longer holds block %d", seq.ID, id, i))
		}
		if b.refCount == 0 {
			revived++
		}
	}
	if bm.blocksFor(numTokens)-len(cached) > bm.numFree-revived {
		return false
	}
	for _, id := range cached {
		bm.ref(id)
	}
	seq.BlockTable = append(seq.BlockTable, cached...)
	seq.numRegistered = len(cached)
	if bm.prefixCaching {
		bm.queries += int64(seq.Len())
		bm.hits += int64(len(cached) * bm.blockSize)
	}
	if !bm.Allocate(seq, numTokens) {
		panic("sched: Admit: allocation failed after the capacity check")
	}
	return true
}

// register puts the full blocks among the first numTokens tokens of seq into
// the prefix cache.
//
// It runs at scheduling time, before the model has computed those tokens, as
// in vLLM v1: a request with the same prefix scheduled later in the same step
// (or in any later step) then reuses the blocks instead of computing them a
// second time. That is safe because the forward pass writes the KV of every
// token of the batch into the cache, layer by layer, before attention of that
// layer reads it, so a reader in the same batch sees the KV its writer
// produced. The price: if a forward pass fails, the cache holds blocks that
// were never written, and the engine must call ResetPrefixCache.
func (bm *BlockManager) register(seq *Sequence, numTokens int) {
	if !bm.prefixCaching {
		return
	}
	full := min(numTokens, seq.Len()-seq.pending-seq.drafts) / bm.blockSize
	if full <= seq.numRegistered {
		return
	}
	bs := bm.blockSize
	hashes := seq.hashes(full, bs)
	for i := seq.numRegistered; i < full; i++ {
		h := hashes[i]
		if _, dup := bm.cache[h]; dup {
			// Another block already holds these tokens (two sequences
			// computed the same content independently). Keep the first:
			// the map holds one block per hash and this one stays private.
			continue
		}
		id := seq.BlockTable[i]
		b := &bm.blocks[id]
		b.hashed, b.hash = true, h
		b.tokens = append(b.tokens[:0], seq.TokenIDs[i*bs:(i+1)*bs]...)
		bm.cache[h] = id
	}
	seq.numRegistered = full
}

// Free releases all blocks of seq, last block first so that the tail of the
// sequence is evicted before its (more shareable) prefix. Blocks still
// referenced by other sequences stay allocated; cached blocks stay in the
// cache until allocation evicts them.
func (bm *BlockManager) Free(seq *Sequence) {
	for i := len(seq.BlockTable) - 1; i >= 0; i-- {
		bm.unref(seq.BlockTable[i])
	}
	seq.BlockTable = nil
	seq.numRegistered = 0
}

// ResetPrefixCache forgets every cached hash. Blocks in use stay with their
// sequences but are no longer shared with new requests. The engine calls it
// when a forward pass failed, since blocks registered at scheduling time may
// then hold no valid KV.
func (bm *BlockManager) ResetPrefixCache() {
	for id := range bm.blocks {
		bm.unhash(int32(id))
	}
}

// ref adds a reference to block id, taking it out of the free queue if it
// was free (a cache hit on a freed block).
func (bm *BlockManager) ref(id int32) {
	b := &bm.blocks[id]
	if b.refCount == 0 {
		bm.remove(id)
	}
	b.refCount++
}

// unref drops a reference; the last one returns the block to the tail of the
// free queue.
func (bm *BlockManager) unref(id int32) {
	b := &bm.blocks[id]
	if b.refCount <= 0 {
		panic(fmt.Sprintf("sched: block %d freed more often than allocated", id))
	}
	b.refCount--
	if b.refCount == 0 {
		bm.pushTail(id)
	}
}

// unhash removes block id from the prefix cache.
func (bm *BlockManager) unhash(id int32) {
	b := &bm.blocks[id]
	if !b.hashed {
		return
	}
	delete(bm.cache, b.hash)
	b.hashed, b.hash, b.tokens = false, 0, b.tokens[:0]
}

// popHead takes the block with the highest eviction priority for a new
// allocation, evicting its cached content. The caller checked numFree.
func (bm *BlockManager) popHead() int32 {
	id := bm.head
	bm.remove(id)
	bm.unhash(id)
	bm.blocks[id].refCount = 1
	return id
}

// pushTail appends block id to the free queue.
func (bm *BlockManager) pushTail(id int32) {
	b := &bm.blocks[id]
	b.free, b.prev, b.next = true, bm.tail, noBlock
	if bm.tail == noBlock {
		bm.head = id
	} else {
		bm.blocks[bm.tail].next = id
	}
	bm.tail = id
	bm.numFree++
}

// remove unlinks block id from anywhere in the free queue in O(1).
func (bm *BlockManager) remove(id int32) {
	b := &bm.blocks[id]
	if b.prev == noBlock {
		bm.head = b.next
	} else {
		bm.blocks[b.prev].next = b.next
	}
	if b.next == noBlock {
		bm.tail = b.prev
	} else {
		bm.blocks[b.next].prev = b.prev
	}
	b.free, b.prev, b.next = false, noBlock, noBlock
	bm.numFree--
}
