import EngineWorkloads

// The data path end to end, one workload per invocation (EngineWorkloads/Workloads.swift lists
// them), as an async main: what users' programs are, and what the figures in Docs/Benchmarks.md
// were measured with (the idle figures depend on which threads allocate).
try await runWorkload()
