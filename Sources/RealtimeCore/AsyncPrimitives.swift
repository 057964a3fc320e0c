import DequeModule
public import NIOConcurrencyHelpers

/// A value that arrives once; any number of callers of `value()` wait for it.
///
/// Public as SPI, its calls `@inlinable`: each client module specializes them for its value type (a
/// SignalR invocation completes one; unspecialized, looking up generic metadata was a tenth of an
/// invocation's CPU). An `@inlinable package` body is not used by other modules.
@_spi(RealtimeEngine) public final class OneShot<Value: Sendable>: Sendable {
    @usableFromInline
    struct State: Sendable {
        @usableFromInline var result: Result<Value, any Error>?
        /// The first waiter of ``value()`` (most have one: no array), then the others.
        @usableFromInline var firstWaiter: CheckedContinuation<Value, any Error>?
        @usableFromInline var waiters: [CheckedContinuation<Value, any Error>] = []
        /// Waiters of ``cancellableValue()``, by id.
        @usableFromInline var cancellable: [Int: CheckedContinuation<Value, any Error>] = [:]
        @usableFromInline var nextID = 0
        @usableFromInline var callbacks: [@Sendable (Result<Value, any Error>) -> Void] = []
    }

    @usableFromInline let state = NIOLockedValueBox(State())

    @inlinable
    public init() {}

    /// Sets the result (the first call wins) and wakes every waiter.
    @inlinable
    public func complete(_ result: Result<Value, any Error>) {
        guard let woken = state.withLockedValue({ state -> State? in
            guard state.result == nil else { return nil }
            state.result = result
            defer {
                state.firstWaiter = nil
                state.waiters = []
                state.cancellable = [:]
                state.callbacks = []
            }
            return state
        }) else { return }
        woken.firstWaiter?.resume(with: result)
        for waiter in woken.waiters { waiter.resume(with: result) }
        for waiter in woken.cancellable.values { waiter.resume(with: result) }
        for callback in woken.callbacks { callback(result) }
    }

    /// Calls `callback` with the result when it arrives (at once if it has), on the completing
    /// thread: for a synchronous API that reports later, without a task that only waits.
    @inlinable
    public func whenComplete(_ callback: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        let ready = state.withLockedValue { state -> Result<Value, any Error>? in
            if let result = state.result { return result }
            state.callbacks.append(callback)
            return nil
        }
        if let ready { callback(ready) }
    }

    /// Whether ``complete(_:)`` has been called.
    @inlinable
    public var isCompleted: Bool { state.withLockedValue { $0.result != nil } }

    @inlinable
    public func value() async throws -> Value {
        try await withCheckedThrowingContinuation { continuation in
            let ready = state.withLockedValue { state -> Result<Value, any Error>? in
                if let result = state.result { return result }
                if state.firstWaiter == nil { state.firstWaiter = continuation } else { state.waiters.append(continuation) }
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    /// The value; a waiter whose task is cancelled stops waiting with `CancellationError` (the value
    /// still arrives for the others).
    @inlinable
    public func cancellableValue() async throws -> Value {
        let id = state.withLockedValue { state -> Int in
            defer { state.nextID += 1 }
            return state.nextID
        }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                let ready = state.withLockedValue { state -> Result<Value, any Error>? in
                    if let result = state.result { return result }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.cancellable[id] = continuation
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            self.state.withLockedValue { $0.cancellable.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }
}

/// A first-in, first-out async lock: waiters get it in the order they asked. SignalR's stateful
/// reconnect records and writes under it (a resend never interleaves with a live write); Spreadbot's
/// POST sends go out one at a time under it, so they reach the server in order.
package final class FIFOGate: Sendable {
    private let state = NIOLockedValueBox<(locked: Bool, waiters: Deque<CheckedContinuation<Void, Never>>)>((false, []))

    package init() {}

    package func lock() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLockedValue { state -> Bool in
                if !state.locked {
                    state.locked = true
                    return true
                }
                state.waiters.append(continuation)
                return false
            }
            if acquired { continuation.resume() }
        }
    }

    package func unlock() {
        let next = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            if let next = state.waiters.popFirst() { return next }
            state.locked = false
            return nil
        }
        next?.resume()
    }

    package func withLock<T>(_ body: () async throws -> T) async rethrows -> T {
        await lock()
        defer { unlock() }
        return try await body()
    }
}
