import NIOConcurrencyHelpers

/// A current value plus an `AsyncSequence` of its changes, for any number of observers.
///
/// Each call to ``updates(bufferSize:)`` starts a new sequence that first yields the current value,
/// then every later change. Sequences end when ``finish()`` is called.
///
/// Memory: each sequence holds at most `bufferSize` values its observer has not read yet (default
/// ``defaultBufferSize``). An observer that falls further behind (or never reads) loses the oldest
/// ones, never the latest: the last value it reads is always the current one.
public final class StateBroadcaster<Value: Sendable>: Sendable {
    private struct State {
        var value: Value
        var nextID = 0
        var continuations: [Int: AsyncStream<Value>.Continuation] = [:]
        var finished = false
    }

    private let state: NIOLockedValueBox<State>

    /// Makes a broadcaster whose current value is `initial`.
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

    /// How many unread values one observer's sequence holds by default.
    public static var defaultBufferSize: Int { 256 }

    /// The current value followed by every change. A slow observer sees every change while it is at
    /// most `bufferSize` values behind; beyond that the oldest unread values are dropped.
    public func updates(bufferSize: Int = StateBroadcaster.defaultBufferSize) -> AsyncStream<Value> {
        let (stream, continuation) = AsyncStream<Value>.makeStream(bufferingPolicy: .bufferingNewest(max(1, bufferSize)))
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

    /// Ends every observer's sequence; later `updates()` yield the last value and end.
    public func finish() {
        let continuations = state.withLockedValue { state -> [AsyncStream<Value>.Continuation] in
            state.finished = true
            defer { state.continuations.removeAll() }
            return Array(state.continuations.values)
        }
        for continuation in continuations { continuation.finish() }
    }
}
