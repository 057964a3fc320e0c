import NIOConcurrencyHelpers
package import NIOCore

extension InboundBuffer {
    /// Feeds `continuation` from this buffer, on the producer's thread: what a read brings is
    /// transformed and yielded where it was read (the connection's event loop), so the stream's
    /// consumer is resumed straight on its own executor (its actor, or the event loop it prefers),
    /// with no hop per element. For an `AsyncThrowingStream` a library must hand out whose
    /// `init(unfolding:)` closure would run off the consumer's actor for every element.
    ///
    /// `continuation` must buffer at most a bounded count (`.bufferingOldest(n)`): when it is full, the
    /// element it refuses is kept (never dropped) with those after it, and the yield is tried again
    /// on `eventLoop` after 1 ms, then at most every 16 ms while the consumer is behind. Meanwhile the
    /// elements wait here, and past this buffer's limit the connection stops reading. A transform that
    /// throws ends the stream with its error; once the stream has ended or its consumer has left
    /// (the stream is terminated), what waits and what comes later is let go, so that a stream
    /// nobody reads never holds the connection back.
    package func push<Output: Sendable>(
        into continuation: AsyncThrowingStream<Output, any Error>.Continuation, retryingOn eventLoop: any EventLoop,
        _ transform: @escaping @Sendable (Element) throws -> Output
    ) {
        let pusher = InboundPusher(buffer: self, continuation: continuation, eventLoop: eventLoop, transform: transform)
        continuation.onTermination = { _ in
            // The pusher lets go of what waits, on the loop (where it runs), without parking it there.
            if pusher.stop() { eventLoop.execute { pusher.drain() } }
        }
        setConsumerStarter { pusher.drain() }
    }
}

/// The one consumer of an ``InboundBuffer`` that ``InboundBuffer/push(into:retryingOn:_:)`` made: runs
/// when the buffer starts it, and from its retry timer; never two at once (the buffer starts a
/// consumer only once the last one parked, and one that waits for its retry has not parked).
private final class InboundPusher<Element: Sendable, Output: Sendable>: Sendable {
    private struct State {
        /// Taken from the buffer, not yet accepted by the continuation.
        var held: ArraySlice<Element> = []
        var retryDelay = TimeAmount.milliseconds(1)
        var stopped = false
    }

    private let buffer: InboundBuffer<Element>
    private let continuation: AsyncThrowingStream<Output, any Error>.Continuation
    private let eventLoop: any EventLoop
    private let transform: @Sendable (Element) throws -> Output
    private let state = NIOLockedValueBox(State())

    init(
        buffer: InboundBuffer<Element>, continuation: AsyncThrowingStream<Output, any Error>.Continuation, eventLoop: any EventLoop,
        transform: @escaping @Sendable (Element) throws -> Output
    ) {
        self.buffer = buffer
        self.continuation = continuation
        self.eventLoop = eventLoop
        self.transform = transform
    }

    /// Stops pushing; true the first time.
    @discardableResult
    func stop() -> Bool {
        state.withLockedValue { state in
            defer { state.stopped = true }
            return !state.stopped
        }
    }

    /// After the stream ended: lets go of what waits until nothing does (the buffer's producer is
    /// resumed as elements are taken), then parks.
    private func discardAll() {
        while case .batch = buffer.takeOrParkOrEnd() {}
    }

    func drain() {
        guard
            var items = state.withLockedValue({ state -> ArraySlice<Element>? in
                if state.stopped { return nil }
                defer { state.held = [] }
                return state.held
            })
        else { return discardAll() }
        while true {
            if items.isEmpty {
                switch buffer.takeOrParkOrEnd() {
                case .batch(let batch): items = batch[...]
                case .parked: return
                case .end(let error):
                    continuation.finish(throwing: error)
                    return
                }
            }
            while let item = items.first {
                let output: Output
                do {
                    output = try transform(item)
                } catch {
                    stop()
                    continuation.finish(throwing: error)
                    return discardAll()
                }
                switch continuation.yield(output) {
                case .enqueued:
                    items.removeFirst()
                case .dropped:
                    // Full: this element and the rest wait for the consumer to take some.
                    let delay = state.withLockedValue { state -> TimeAmount in
                        state.held = items
                        defer { state.retryDelay = min(state.retryDelay * 2, .milliseconds(16)) }
                        return state.retryDelay
                    }
                    eventLoop.scheduleTask(in: delay) { self.drain() }
                    return
                case .terminated:
                    stop()
                    return discardAll()
                @unknown default:
                    items.removeFirst()
                }
            }
            state.withLockedValue { $0.retryDelay = .milliseconds(1) }
        }
    }
}
