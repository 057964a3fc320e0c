import EngineWorkloads
import Foundation

// The same workloads for valgrind (Scripts/callgrind_per_message.sh), which cannot run an async
// main: it stops at the main queue's drain (dispatch_main). The workload runs in a task on the main
// actor while the main thread drains the main queue in Foundation's run loop.
Task { @MainActor in
    do {
        try await runWorkload()
    } catch {
        FileHandle.standardError.write(Data("\(error)\n".utf8))
        exit(2)
    }
    exit(0)
}
while true { RunLoop.main.run(until: .distantFuture) }
