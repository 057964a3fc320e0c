import NIOConcurrencyHelpers

/// Collects what callbacks see, and lets a test await a number of them: woken by the append that
/// makes the count, not by polling. The limit is only a guard against a hang.
public final class Recorder<Value: Sendable>: Sendable {
    private struct State {
        var values: [Value] = []
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state = NIOLockedValueBox(State())

    /// Makes an empty recorder.
    public init() {}

    /// Records `value` after those recorded before it.
    public func append(_ value: Value) {
        let ready = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.values.append(value)
            let count = state.values.count
            let ready = state.waiters.filter { $0.count <= count }.map(\.continuation)
            state.waiters.removeAll { $0.count <= count }
            return ready
        }
        for waiter in ready { waiter.resume() }
    }

    /// Everything recorded so far, in order.
    public var values: [Value] { state.withLockedValue { $0.values } }
    /// The same as ``values``.
    public var all: [Value] { values }

    /// Waits until at least `count` values arrived, or `limit` passed; returns what is there.
    @discardableResult
    public func wait(for count: Int, limit: Duration = .seconds(30)) async -> [Value] {
        let arrived = await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let ready = self.state.withLockedValue { state -> Bool in
                        if state.values.count >= count { return true }
                        state.waiters.append((count, continuation))
                        return false
                    }
                    if ready { continuation.resume() }
                }
                return true
            }
            group.addTask {
                // The guard against a hang, on real time: the values come from real sockets.
                try? await Task.sleep(for: limit)
                return false
            }
            let first = await group.next() ?? false
            group.cancelAll()
            // Release a waiter the limit left behind.
            let stale = self.state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
                defer { state.waiters = [] }
                return state.waiters.map(\.continuation)
            }
            for waiter in stale { waiter.resume() }
            return first
        }
        _ = arrived
        return values
    }

    /// Waits until at least `count` values arrived; throws when `seconds` pass first.
    public func wait(count: Int, within seconds: Double = 30) async throws -> [Value] {
        let values = await wait(for: count, limit: .milliseconds(Int64(seconds * 1000)))
        guard values.count >= count else {
            throw LoopbackServerError(message: "waited \(seconds) s for \(count) values, got \(values.count)")
        }
        return values
    }
}
