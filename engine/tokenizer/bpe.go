package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

const (
	// maxTokenID bounds ids read from a tokenizer.json, so that a corrupt
	// file cannot make Load allocate gigabytes.
	maxTokenID = 1 << 24
	// cacheCapacity and cacheMaxWordLen bound the per-word BPE cache, as in
	// Hugging Face (10,000 words shorter than 256 bytes).
	cacheCapacity   = 10000
	cacheMaxWordLen = 256
)

// mergeInfo is the rank of a merge (lower merges first) and the id of the
// token it produces.
type mergeInfo struct {
	rank  int32
	newID int32
}

// bpeModel is a byte-pair-encoding model.
type bpeModel struct {
	vocab        map[string]int32
	merges       map[uint64]mergeInfo
	unkID        int32 // -1 when there is no unk token
	contPrefix   string
	endSuffix    string
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	// byteIDs[b] is the id of the "<0xXX>" token for byte b, or -1.
	byteIDs [256]int32

	cacheMu sync.RWMutex
	cache   map[string][]int32
}

// bpeJSON is the "model" component of tokenizer.json for BPE.
type bpeJSON struct {
	Type         string          `json:"type"`
	Dropout      *float64        `json:"dropout"`
	UnkToken     *string         `json:"unk_token"`
	ContPrefix   *string         `json:"continuing_subword_prefix"`
	EndSuffix    *string         `json:"end_of_word_suffix"`
	FuseUnk      bool            `json:"fuse_unk"`
	ByteFallback bool            `json:"byte_fallback"`
	IgnoreMerges bool            `json:"ignore_merges"`
	Vocab        json.RawMessage `json:"vocab"`
	Merges       json.RawMessage `json:"merges"`
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// buildBPE decodes a BPE model component.
func buildBPE(raw json.RawMessage) (*bpeModel, error) {
	var cfg bpeJSON
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if cfg.Type == "" && len(cfg.Merges) > 0 {
		cfg.Type = "BPE"
	}
	if cfg.Type != "BPE" {
		if cfg.Type == "" {
			return nil, errors.New(`model: missing "type"`)
		}
		return nil, fmt.Errorf("unsupported model type %q (only BPE is implemented)", cfg.Type)
	}
	if isNull(cfg.Vocab) {
		return nil, errors.New("model: BPE needs a vocab")
	}
	vocab, err := parseVocab(cfg.Vocab)
	if err != nil {
		return nil, fmt.Errorf("model: vocab: %w", err)
	}
	m := &bpeModel{
		vocab:        vocab,
		unkID:        -1,
		fuseUnk:      cfg.FuseUnk,
		byteFallback: cfg.ByteFallback,
		ignoreMerges: cfg.IgnoreMerges,
		cache:        make(map[string][]int32),
	}
	for tok, id := range m.vocab {
		if id < 0 || id >= maxTokenID {
			return nil, fmt.Errorf("model: token %q has out-of-range id %d", tok, id)
		}
	}
	if cfg.ContPrefix != nil {
		m.contPrefix = *cfg.ContPrefix
	}
	if cfg.EndSuffix != nil {
		m.endSuffix = *cfg.EndSuffix
	}
	if cfg.UnkToken != nil {
		id, ok := m.vocab[*cfg.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model: unk_token %q is not in the vocab", *cfg.UnkToken)
		}
		m.unkID = id
	}
	for b := 0; b < 256; b++ {
		m.byteIDs[b] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", b)]; ok {
			m.byteIDs[b] = id
		}
	}
	merges, err := parseMerges(cfg.Merges)
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	m.merges = make(map[uint64]mergeInfo, len(merges))
	for rank, pair := range merges {
		a, okA := m.vocab[pair[0]]
		b, okB := m.vocab[pair[1]]
		if !okA || !okB {
			return nil, fmt.Errorf("model: merge %d (%q, %q) uses a token that is not in the vocab", rank, pair[0], pair[1])
		}
		merged := pair[0] + strings.TrimPrefix(pair[1], m.contPrefix)
		newID, ok := m.vocab[merged]
		if !ok {
			return nil, fmt.Errorf("model: merge %d produces %q, which is not in the vocab", rank, merged)
		}
		m.merges[pairKey(a, b)] = mergeInfo{rank: int32(rank), newID: newID}
	}
	return m, nil
}

// tokenize splits one pre-tokenized word into token ids, appending to dst.
func (m *bpeModel) tokenize(dst []int32, w string) []int32 {
	if w == "" {
		return dst
	}
	if m.ignoreMerges {
		if id, ok := m.vocab[w]; ok {
			return append(dst, id)
		}
	}
	cacheable := len(w) < cacheMaxWordLen
	if cacheable {
		m.cacheMu.RLock()
		ids, ok := m.cache[w]
		m.cacheMu.RUnlock()
		if ok {
			return append(dst, ids...)
		}
	}
	ids := m.mergeWord(w)
	if cacheable {
		m.cacheMu.Lock()
		if len(m.cache) < cacheCapacity {
			m.cache[w] = ids
		}
		m.cacheMu.Unlock()
	}
	return append(dst, ids...)
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int
	removed    bool
}

// mergeCand is a queued merge of the symbol at pos with its successor.
type mergeCand struct {
	rank  int32
	pos   int
	newID int32
}

// mergeWord maps a word's characters to ids and applies merges lowest rank
// first (leftmost on ties), exactly as Hugging Face's Word::merge_all.
func (m *bpeModel) mergeWord(w string) []int32 {
	syms := make([]symbol, 0, len(w))
	add := func(id int32) {
		syms = append(syms, symbol{id: id, prev: len(syms) - 1, next: len(syms) + 1})
	}
	pendingUnk := false
	flushUnk := func() {
		if pendingUnk {
			add(m.unkID)
			pendingUnk = false
		}
	}
	for i := 0; i < len(w); {
		_, size := utf8.DecodeRuneInString(w[i:])
		s := w[i : i+size]
		if i > 0 && m.contPrefix != "" {
			s = m.contPrefix + s
		}
		if i+size == len(w) && m.endSuffix != "" {
			s += m.endSuffix
		}
		i += size
		if id, ok := m.vocab[s]; ok {
			flushUnk()
			add(id)
			continue
		}
		if m.byteFallback && m.addBytes(s, add) {
			// Note: like Hugging Face, byte tokens do not flush a pending unk.
			continue
		}
		if m.unkID >= 0 {
			if pendingUnk && !m.fuseUnk {
				add(m.unkID)
			}
			pendingUnk = true
		}
	}
	flushUnk()
	if len(syms) == 0 {
		return nil
	}
	syms[len(syms)-1].next = -1
	m.applyMerges(syms)
	out := make([]int32, 0, len(syms))
	for _, s := range syms {
		if !s.removed {
			out = append(out, s.id)
		}
	}
	return out
}

// addBytes adds the <0xXX> tokens of every byte of s (the character with
// any subword prefix or suffix, as Hugging Face does) when all exist.
func (m *bpeModel) addBytes(chunk string, add func(int32)) bool {
	for i := 0; i < len(chunk); i++ {
		if m.byteIDs[chunk[i]] < 0 {
			return false
		}
	}
	for i := 0; i < len(chunk); i++ {
		add(m.byteIDs[chunk[i]])
	}
	return true
}

// applyMerges runs the priority-queue merge loop over the symbol list.
func (m *bpeModel) applyMerges(syms []symbol) {
	if len(syms) < 2 {
		return
	}
	h := make(candHeap, 0, len(syms))
	for i := 0; i+1 < len(syms); i++ {
		if mi, ok := m.merges[pairKey(syms[i].id, syms[i+1].id)]; ok {
			h = append(h, mergeCand{rank: mi.rank, pos: i, newID: mi.newID})
		}
	}
	h.init()
	for len(h) > 0 {
		top := h.pop()
		cur := &syms[top.pos]
		if cur.removed || cur.next < 0 {
			continue
		}
		nextPos := cur.next
		right := syms[nextPos]
		if mi, ok := m.merges[pairKey(cur.id, right.id)]; !ok || mi.newID != top.newID {
			continue
		}
		cur.id = top.newID
		cur.next = right.next
		syms[nextPos].removed = true
		if right.next >= 0 {
			syms[right.next].prev = top.pos
		}
		if cur.prev >= 0 {
			if mi, ok := m.merges[pairKey(syms[cur.prev].id, cur.id)]; ok {
				h.push(mergeCand{rank: mi.rank, pos: cur.prev, newID: mi.newID})
			}
		}
		if cur.next >= 0 {
			if mi, ok := m.merges[pairKey(cur.id, syms[cur.next].id)]; ok {
				h.push(mergeCand{rank: mi.rank, pos: top.pos, newID: mi.newID})
			}
		}
	}
}

// candHeap is a binary min-heap of merge candidates ordered by rank, then
// position.
type candHeap []mergeCand

func (h candHeap) less(i, j int) bool {
	if h[i].rank != h[j].rank {
		return h[i].rank < h[j].rank
	}
	return h[i].pos < h[j].pos
}

func (h candHeap) init() {
	for i := len(h)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *candHeap) push(c mergeCand) {
	*h = append(*h, c)
	h.up(len(*h) - 1)
}

func (h *candHeap) pop() mergeCand {
	old := *h
	top := old[0]
	n := len(old) - 1
	old[0] = old[n]
	*h = old[:n]
	h.down(0)
	return top
}

func (h candHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
}

func (h candHeap) down(i int) {
	n := len(h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		small := l
		if r := l + 1; r < n && h.less(r, l) {
			small = r
		}
		if !h.less(small, i) {
			return
		}
		h[i], h[small] = h[small], h[i]
		i = small
	}
}
