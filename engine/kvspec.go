package engine

// KVBlockBytes is the memory one KV block of blockSize tokens takes over all layers and all
// tensor-parallel ranks, as the model's KV cache spec declares it (in the cache's dtype: the
// backend's, float32 on the cpu).
func (e *Engine) KVBlockBytes(blockSize int) int64 {
	s := e.runner.model.KVCacheSpec()
	return s.BlockBytes(blockSize) * int64(max(1, s.Ranks))
}
