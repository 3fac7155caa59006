// Package sched is the tensor-free core of a continuous-batching LLM engine
// in the style of vLLM v1 and nano-vllm: the paged KV-cache block manager
// (with prefix caching) and the scheduler that decides, step by step, which
// tokens of which sequences the model computes next.
//
// It knows nothing about tensors, models or devices and imports only the
// standard library. The engine owns the loop:
//
//	for s.HasWork() {
//		b := s.Schedule()     // which tokens to compute, blocks already allocated
//		runModel(b)           // writes KV for every item, samples where Item.Sample
//		s.Commit(b)           // those tokens now have KV in the cache
//		for _, it := range b.Items {
//			if it.Sample {
//				s.AppendToken(it.Seq, tok)
//				if stop || s.AtMaxModelLen(it.Seq) {
//					s.Finish(it.Seq)
//				}
//			}
//		}
//	}
//
// Schedule and Commit must alternate: the batch handed to Commit is the one
// the last Schedule returned. Full blocks enter the prefix cache when they are
// scheduled, not when computed (see BlockManager), so the engine must run
// every scheduled batch whole, even for sequences aborted meanwhile; if a
// forward pass fails, it aborts the batch's sequences and calls
// ResetPrefixCache. A Scheduler is not safe for concurrent use; the
// engine loop owns it and funnels aborts from other goroutines into itself.
//
// The KV cache is split into fixed-size blocks; a Sequence's BlockTable maps
// its token positions to physical blocks (position p lives in block
// BlockTable[p/BlockSize], slot p%BlockSize). Full blocks are identified by a
// hash chained over all tokens before them, so a new request whose prompt
// starts like an earlier one reuses those blocks instead of recomputing them.
package sched
