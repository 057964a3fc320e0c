import Foundation
internal import RealtimeCore

/// A value behind a lock: the compat classes' mutable state, read and written from the caller's
/// thread, the callback queue and the connection's tasks.
// @unchecked Sendable: every access to `value` goes through `lock`.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value

    init(_ value: Value) { self.value = value }

    func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// Runs `work` later on `queue`, never inside the caller's call (the original libraries' callbacks
/// always arrive through their queue).
func deliver(on queue: DispatchQueue, _ work: @escaping () -> Void) {
    let box = HandOff(work)
    queue.async { box.value() }
}

/// Runs one call of the callback API. Unstructured on purpose: those calls return at once and
/// report through a callback or the delegate, so no caller waits that could own the work.
func background(_ body: @escaping @Sendable () async -> Void) {
    // The callback API returns at once; the result goes to a callback, so no caller owns this task.
    Task { await body() }
}

/// Holds the delegate's lifecycle calls while calls of the callback API are finishing, so that a call
/// the connection failed when it closed or was lost reaches its completion before
/// `connectionDidClose` or `connectionWillReconnect`, in SwiftSignalRClient's order. Every call is
/// bracketed by ``begin()`` and ``end(on:)``; the connection completes each one on a close or a loss,
/// so a held report waits only for those completions.
final class ReportGate: Sendable {
    private let state = Locked<(inflight: Int, held: [HandOff<() -> Void>])>((0, []))

    /// A call started.
    func begin() {
        state.withLock { $0.inflight += 1 }
    }

    /// A call's completion was queued; held reports go out when none is left.
    func end(on queue: DispatchQueue) {
        state.withLock { state in
            state.inflight -= 1
            guard state.inflight == 0 else { return }
            for work in state.held { deliver(on: queue, work.value) }
            state.held = []
        }
    }

    /// Queues `work` now, or after the calls under way have completed.
    func report(on queue: DispatchQueue, _ work: @escaping () -> Void) {
        state.withLock { state in
            if state.inflight == 0 && state.held.isEmpty {
                deliver(on: queue, work)
            } else {
                state.held.append(HandOff(work))
            }
        }
    }
}
