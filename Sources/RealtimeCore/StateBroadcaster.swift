import NIOConcurrencyHelpers

/// A current value plus an `AsyncSequence` of its changes, for any number of observers.
///
/// Each call to ``updates()`` starts a new sequence that first yields the current value, then every
/// later change. Sequences end when ``finish()`` is called.
public final class StateBroadcaster<Value: Sendable>: Sendable {
    private struct State {
        var value: Value
        var nextID = 0
        var continuations: [Int: AsyncStream<Value>.Continuation] = [:]
        var finished = false
    }

    private let state: NIOLockedValueBox<State>

    public init(_ initial: Value) {
        state = NIOLockedValueBox(State(value: initial))
    }

    /// The latest value.
    public var current: Value { state.withLockedValue { $0.value } }

    /// Sets a new value and hands it to every observer.
    public func update(_ value: Value) {
        let continuations = state.withLockedValue { state -> [AsyncStream<Value>.Continuation] in
            state.value = value
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.yield(value) }
    }

    /// The current value followed by every change. Buffers every change, so a slow observer sees them all.
    public func updates() -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream<Value>.makeStream()
        let (current, finished, id) = state.withLockedValue { state -> (Value, Bool, Int) in
            let id = state.nextID
            state.nextID += 1
            if !state.finished {
                state.continuations[id] = continuation
                continuation.yield(state.value)
            }
            return (state.value, state.finished, id)
        }
        if finished {
            continuation.yield(current)
            continuation.finish()
        }
        continuation.onTermination = { [weak self] _ in
            self?.state.withLockedValue { _ = $0.continuations.removeValue(forKey: id) }
        }
        return stream
    }

    /// Ends every observer's sequence; later ``updates()`` yield the last value and end.
    public func finish() {
        let continuations = state.withLockedValue { state -> [AsyncStream<Value>.Continuation] in
            state.finished = true
            defer { state.continuations.removeAll() }
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }
}
