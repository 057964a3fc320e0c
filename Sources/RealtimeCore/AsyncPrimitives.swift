import DequeModule
public import NIOConcurrencyHelpers

/// A value that arrives once; any number of callers of `value()` wait for it.
///
/// Public as SPI, its calls `@inlinable`: each client module specializes them for its value type (a
/// SignalR invocation completes one; unspecialized, looking up generic metadata was a tenth of an
/// invocation's CPU). An `@inlinable package` body is not used by other modules.
///
/// Its state is made in its initializer (a stored property's initial value is not inlined, and ran
/// as generic code), and what most uses never need (more waiters, cancellable waiters, callbacks)
/// lives apart from the one waiter most have. Every waiter is resumed exactly once: the result is
/// set once, under the lock that hands the waiters over.
@_spi(RealtimeEngine) public final class OneShot<Value: Sendable>: Sendable {
    @usableFromInline
    struct State: Sendable {
        @usableFromInline var result: Result<Value, any Error>?
        /// The first waiter of ``value()`` (most have one, and nothing else).
        @usableFromInline var firstWaiter: UnsafeContinuation<Value, any Error>?
        /// The other waiters and callbacks, once there are any (boxed: a pointer until then).
        @usableFromInline var extras: Extras

        @inlinable
        init() {
            result = nil
            firstWaiter = nil
            extras = .none
        }

        /// Changes the extras, making them first if there are none.
        @inlinable
        mutating func withMore<R>(_ body: (inout More) -> R) -> R {
            var more: More
            if case .some(let existing) = extras { more = existing } else { more = More() }
            extras = .none
            defer { extras = .some(more) }
            return body(&more)
        }
    }

    @usableFromInline
    enum Extras: Sendable {
        case none
        indirect case some(More)
    }

    @usableFromInline
    struct More: Sendable {
        @usableFromInline var waiters: [UnsafeContinuation<Value, any Error>]
        /// Waiters of ``cancellableValue()``, by id.
        @usableFromInline var cancellable: [Int: UnsafeContinuation<Value, any Error>]
        @usableFromInline var nextID: Int
        @usableFromInline var callbacks: [@Sendable (Result<Value, any Error>) -> Void]

        @inlinable
        init() {
            waiters = []
            cancellable = [:]
            nextID = 0
            callbacks = []
        }
    }

    @usableFromInline let state: NIOLockedValueBox<State>

    @inlinable
    public init() {
        state = NIOLockedValueBox(State())
    }

    /// Sets the result (the first call wins) and wakes every waiter.
    @inlinable
    public func complete(_ result: Result<Value, any Error>) {
        guard let (first, more) = state.withLockedValue({ state -> (UnsafeContinuation<Value, any Error>?, More?)? in
            guard state.result == nil else { return nil }
            state.result = result
            defer {
                state.firstWaiter = nil
                state.extras = .none
            }
            guard case .some(let more) = state.extras else { return (state.firstWaiter, nil) }
            return (state.firstWaiter, more)
        }) else { return }
        first?.resume(with: result)
        guard let more else { return }
        for waiter in more.waiters { waiter.resume(with: result) }
        for waiter in more.cancellable.values { waiter.resume(with: result) }
        for callback in more.callbacks { callback(result) }
    }

    /// Calls `callback` with the result when it arrives (at once if it has), on the completing
    /// thread: for a synchronous API that reports later, without a task that only waits.
    @inlinable
    public func whenComplete(_ callback: @escaping @Sendable (Result<Value, any Error>) -> Void) {
        let ready = state.withLockedValue { state -> Result<Value, any Error>? in
            if let result = state.result { return result }
            state.withMore { $0.callbacks.append(callback) }
            return nil
        }
        if let ready { callback(ready) }
    }

    /// Whether ``complete(_:)`` has been called.
    @inlinable
    public var isCompleted: Bool { state.withLockedValue { $0.result != nil } }

    @inlinable
    public func value() async throws -> Value {
        try await withUnsafeThrowingContinuation { continuation in
            let ready = state.withLockedValue { state -> Result<Value, any Error>? in
                if let result = state.result { return result }
                if state.firstWaiter == nil {
                    state.firstWaiter = continuation
                } else {
                    state.withMore { $0.waiters.append(continuation) }
                }
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
            state.withMore { more in
                defer { more.nextID += 1 }
                return more.nextID
            }
        }
        return try await withTaskCancellationHandler {
            try await withUnsafeThrowingContinuation { continuation in
                let ready = state.withLockedValue { state -> Result<Value, any Error>? in
                    if let result = state.result { return result }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.withMore { $0.cancellable[id] = continuation }
                    return nil
                }
                if let ready { continuation.resume(with: ready) }
            }
        } onCancel: {
            self.state.withLockedValue { state -> UnsafeContinuation<Value, any Error>? in
                guard case .some = state.extras else { return nil }
                return state.withMore { $0.cancellable.removeValue(forKey: id) }
            }?.resume(throwing: CancellationError())
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
