public import NIOConcurrencyHelpers
public import NIOCore
public import NIOPosix

/// The hand-off from a connection to the one task that consumes what it receives.
///
/// The connection (on its event loop) hands over everything one read produced in one call; a
/// consumer that waits is woken once for the whole batch. The consumer's iterator takes every
/// buffered element in one step and walks them locally, with no lock and no hop per element. So
/// however many messages a read carries, they cost one wake-up when the consumer keeps up, and none
/// when it is behind.
///
/// Backpressure: once `limit` elements wait, ``yield(contentsOf:)`` answers `false`; the connection
/// stops reading and `onDemand` is called when the consumer has taken them. What is held is at most
/// `limit` plus one read's worth waiting, and as much again in the consumer's batch.
///
/// With an ``Overflow`` that drops, the producer is never paused (a reader that must keep answering
/// the heartbeat): past `limit` waiting elements the oldest or the newest go, counted in
/// ``droppedCount``.
@_spi(RealtimeEngine) public final class InboundBuffer<Element: Sendable>: Sendable {
    /// What happens when `limit` elements wait.
    public enum Overflow: Sendable {
        /// The producer is told to pause (`false` from the producer calls) until the consumer takes.
        case pause
        /// The oldest waiting elements go. They are let go in steps (when twice `limit` wait, and
        /// when the consumer takes), so that a consumer far behind costs no copy per element.
        case dropOldest
        /// The new elements go.
        case dropNewest
    }

    @usableFromInline struct State: Sendable {
        @usableFromInline var items: [Element] = []
        /// Elements dropped by the overflow rule so far.
        @usableFromInline var dropped = 0
        /// Times a consumer was resumed or started with elements (one per hand-over, not per element).
        @usableFromInline var wakeUps = 0
        @usableFromInline var consumer: CheckedContinuation<[Element]?, any Error>?
        @usableFromInline var finished = false
        @usableFromInline var failure: (any Error)?
        @usableFromInline var producerPaused = false
        @usableFromInline var onDemand: (@Sendable () -> Void)?
        /// A flush is scheduled on an event loop (``append(contentsOf:flushingOn:)``).
        @usableFromInline var flushScheduled = false
        /// Starts a consumer when elements arrive and none runs (``setConsumerStarter(_:)``).
        @usableFromInline var starter: (@Sendable () -> Void)?
        /// No consumer runs: the next elements call `starter`.
        @usableFromInline var parked = false
    }

    @usableFromInline let state = NIOLockedValueBox(State())
    /// How many elements may wait before the producer is asked to pause.
    public let limit: Int
    @usableFromInline let overflow: Overflow

    public init(limit: Int, overflow: Overflow = .pause) {
        self.limit = max(1, limit)
        self.overflow = overflow
    }

    /// Elements dropped by the ``Overflow`` rule so far (those waiting past `limit` included).
    @inlinable public var droppedCount: Int {
        state.withLockedValue { state in
            state.dropped + (overflow == .dropOldest ? max(0, state.items.count - limit) : 0)
        }
    }

    /// How many times a consumer was handed elements: resumed from a wait or started on demand. One
    /// per batch, however many elements it holds; what tests count to see that a read's messages
    /// cost one wake-up.
    @inlinable public var consumerWakeUps: Int { state.withLockedValue { $0.wakeUps } }

    /// Applies the overflow rule after elements were added (under the lock). Returns whether the
    /// producer may go on.
    @inlinable func admit(_ state: inout State) -> Bool {
        switch overflow {
        case .pause:
            if state.items.count >= limit {
                state.producerPaused = true
                return false
            }
        case .dropOldest:
            if state.items.count >= 2 * limit { Self.dropOldest(&state, keeping: limit) }
        case .dropNewest:
            if state.items.count > limit {
                state.dropped += state.items.count - limit
                state.items.removeLast(state.items.count - limit)
            }
        }
        return true
    }

    @inlinable static func dropOldest(_ state: inout State, keeping limit: Int) {
        guard state.items.count > limit else { return }
        state.dropped += state.items.count - limit
        state.items.removeFirst(state.items.count - limit)
    }

    /// What waits, taken for the consumer (under the lock): the newest `limit` with `dropOldest`.
    @inlinable func takeItems(_ state: inout State) -> [Element] {
        if overflow == .dropOldest { Self.dropOldest(&state, keeping: limit) }
        let batch = state.items
        state.items = []
        return batch
    }

    // MARK: Producer

    /// Consumers on demand: instead of a consumer that waits for the next elements for as long as
    /// the buffer lives, `start` is called (outside the lock) when elements arrive and no consumer
    /// runs; that consumer takes with ``takeOrPark()`` until it answers nil, and then ends. So a
    /// quiet buffer holds no waiting task. At most one consumer runs at a time.
    @inlinable public func setConsumerStarter(_ start: @escaping @Sendable () -> Void) {
        let startNow = state.withLockedValue { state -> Bool in
            state.starter = start
            state.parked = state.items.isEmpty
            return !state.parked
        }
        if startNow { start() }
    }

    /// For a consumer started on demand: everything buffered, or nil when nothing is (the consumer
    /// is then parked and ends; the next elements start another) or the buffer is finished.
    @inlinable public func takeOrPark() -> [Element]? {
        let (batch, demand) = state.withLockedValue { state -> ([Element]?, (@Sendable () -> Void)?) in
            guard !state.items.isEmpty else {
                state.parked = true
                return (nil, nil)
            }
            let batch = takeItems(&state)
            let demand = state.producerPaused ? state.onDemand : nil
            state.producerPaused = false
            return (batch, demand)
        }
        demand?()
        return batch
    }

    /// Unparks a parked consumer when elements wait (under the lock): the starter to call.
    @inlinable static func unpark(_ state: inout State) -> (@Sendable () -> Void)? {
        guard state.parked, !state.items.isEmpty, let starter = state.starter else { return nil }
        state.parked = false
        state.wakeUps += 1
        return starter
    }

    /// Called (outside the lock, once) when the consumer took the elements after a producer was told
    /// to pause. The producer that was told to pause sets it before pausing.
    @inlinable public func setOnDemand(_ onDemand: (@Sendable () -> Void)?) {
        state.withLockedValue { $0.onDemand = onDemand }
    }

    /// Hands `elements` to the consumer (waking it if it waits). Returns whether the producer may go
    /// on; `false` means pause until `onDemand` is called. Ignored once finished.
    @discardableResult
    @inlinable public func yield(contentsOf elements: some Collection<Element>) -> Bool {
        guard !elements.isEmpty else { return !isPaused }
        return yield { $0.append(contentsOf: elements) }
    }

    /// ``yield(contentsOf:)`` for a batch the producer lets go of: when nothing waits in the
    /// buffer (the usual case) the buffer takes the batch's storage, without copying each
    /// element in.
    @discardableResult
    @inlinable public func yield(batch elements: [Element]) -> Bool {
        guard !elements.isEmpty else { return !isPaused }
        return yield { items in
            if items.isEmpty { items = elements } else { items.append(contentsOf: elements) }
        }
    }

    /// ``yield(contentsOf:)`` with what `add` appends (one element or a collection; a client
    /// module calls this class unspecialized, where iterating a one-element collection cost
    /// generic metadata lookups per message).
    @inlinable func yield(_ add: (inout [Element]) -> Void) -> Bool {
        let (consumer, batch, goOn, start) = state.withLockedValue {
            state -> (CheckedContinuation<[Element]?, any Error>?, [Element], Bool, (@Sendable () -> Void)?) in
            if state.finished { return (nil, [], true, nil) }
            if let consumer = state.consumer {
                state.consumer = nil
                add(&state.items)
                // A waiting consumer takes it all: the producer is not paused, only a drop rule applies.
                if overflow == .dropNewest { _ = admit(&state) }
                state.wakeUps += 1
                return (consumer, takeItems(&state), true, nil)
            }
            add(&state.items)
            let goOn = admit(&state)
            return (nil, [], goOn, Self.unpark(&state))
        }
        consumer?.resume(returning: batch)
        start?()
        return goOn
    }

    /// Adds `elements` without waking the consumer now: if it waits, it is woken by one job queued
    /// on `eventLoop`, after the producer's current job. For a producer that receives messages one at
    /// a time on that loop (a WebSocket reader task running there): everything it takes in one job
    /// reaches the consumer in one wake-up. Returns what ``yield(contentsOf:)`` returns.
    @discardableResult
    @inlinable public func append(contentsOf elements: some Collection<Element>, flushingOn eventLoop: any EventLoop) -> Bool {
        guard !elements.isEmpty else { return !isPaused }
        return append(flushingOn: eventLoop) { $0.append(contentsOf: elements) }
    }

    /// ``append(contentsOf:flushingOn:)`` with what `add` appends (see ``yield(_:)``).
    @inlinable func append(flushingOn eventLoop: any EventLoop, _ add: (inout [Element]) -> Void) -> Bool {
        let (goOn, schedule) = state.withLockedValue { state -> (Bool, Bool) in
            if state.finished { return (true, false) }
            add(&state.items)
            var schedule = false
            if state.consumer != nil || state.parked, !state.flushScheduled {
                state.flushScheduled = true
                schedule = true
            }
            return (admit(&state), schedule)
        }
        if schedule { eventLoop.execute { self.flush() } }
        return goOn
    }

    /// Wakes a waiting consumer with what is buffered (or starts one, ``setConsumerStarter(_:)``).
    @inlinable public func flush() {
        // `then`: the producer's demand (the consumer took a paused batch), or the starter of a
        // consumer on demand (which takes the elements itself).
        let (consumer, batch, then) = state.withLockedValue {
            state -> (CheckedContinuation<[Element]?, any Error>?, [Element], (@Sendable () -> Void)?) in
            state.flushScheduled = false
            if let start = Self.unpark(&state) { return (nil, [], start) }
            guard let consumer = state.consumer, !state.items.isEmpty else { return (nil, [], nil) }
            state.consumer = nil
            state.wakeUps += 1
            let batch = takeItems(&state)
            let demand = state.producerPaused ? state.onDemand : nil
            state.producerPaused = false
            return (consumer, batch, demand)
        }
        then?()
        consumer?.resume(returning: batch)
    }

    /// ``append(contentsOf:flushingOn:)`` on the event loop this code runs on; off any event loop,
    /// ``yield(contentsOf:)`` (nothing would run the deferred wake-up).
    @discardableResult
    @inlinable public func append(contentsOf elements: some Collection<Element>) -> Bool {
        if let eventLoop = MultiThreadedEventLoopGroup.currentEventLoop {
            return append(contentsOf: elements, flushingOn: eventLoop)
        }
        return yield(contentsOf: elements)
    }

    /// ``append(contentsOf:)`` for a batch the producer lets go of (what one read brought): when
    /// nothing waits in the buffer the buffer takes the batch's storage, without copying each
    /// element in, and one lock is taken for the whole batch.
    @discardableResult
    @inlinable public func append(batch elements: consuming [Element]) -> Bool {
        guard !elements.isEmpty else { return !isPaused }
        // Held in an optional the closures take it out of. The closures are written at each call:
        // one stored in a constant escapes, and its context and the captured variable were
        // allocated per call.
        var elements: [Element]? = consume elements
        if let eventLoop = MultiThreadedEventLoopGroup.currentEventLoop {
            return append(flushingOn: eventLoop) { Self.add(elements.take(), to: &$0) }
        }
        return yield { Self.add(elements.take(), to: &$0) }
    }

    /// Adds a batch to the buffered items: the batch itself when there are none.
    @inlinable static func add(_ batch: [Element]?, to items: inout [Element]) {
        guard let batch else { return }
        if items.isEmpty { items = batch } else { items.append(contentsOf: batch) }
    }

    /// ``append(contentsOf:)`` of one element, moved in (not copied).
    @discardableResult
    @inlinable public func append(_ element: consuming Element) -> Bool {
        // Held in an optional the closure takes it out of: a closure cannot consume what it captures.
        var element: Element? = consume element
        if let eventLoop = MultiThreadedEventLoopGroup.currentEventLoop {
            return append(flushingOn: eventLoop) { if let element = element.take() { $0.append(element) } }
        }
        return yield { if let element = element.take() { $0.append(element) } }
    }

    /// Hands one element over, moved in; see ``yield(contentsOf:)``.
    @discardableResult
    @inlinable public func yield(_ element: consuming Element) -> Bool {
        var element: Element? = consume element
        return yield { if let element = element.take() { $0.append(element) } }
    }

    /// The consumer left for good (no iterator is left): what is buffered is let go, and a producer
    /// that was told to pause is resumed (`onDemand`).
    @inlinable public func discardBuffered() {
        let demand = state.withLockedValue { state -> (@Sendable () -> Void)? in
            state.items = []
            guard state.producerPaused else { return nil }
            state.producerPaused = false
            return state.onDemand
        }
        demand?()
    }

    /// Whether the producer was told to pause and the consumer has not taken the elements yet.
    @inlinable public var isPaused: Bool { state.withLockedValue { $0.producerPaused } }

    /// Ends the sequence: the consumer gets what is buffered, then the end (or `error`).
    @inlinable public func finish(throwing error: (any Error)? = nil) {
        let (consumer, demand) = state.withLockedValue {
            state -> (CheckedContinuation<[Element]?, any Error>?, (@Sendable () -> Void)?) in
            if state.finished { return (nil, nil) }
            state.finished = true
            state.failure = error
            // A finished buffer holds no producer back.
            let demand = state.producerPaused ? state.onDemand : nil
            state.producerPaused = false
            defer { state.consumer = nil }
            return (state.consumer, demand)
        }
        demand?()
        guard let consumer else { return }
        // A parked consumer may wait for a deferred flush: it gets what waits first, the end next.
        let pending = state.withLockedValue { state -> [Element] in
            if !state.items.isEmpty { state.wakeUps += 1 }
            return takeItems(&state)
        }
        if !pending.isEmpty {
            consumer.resume(returning: pending)
        } else if let error {
            state.withLockedValue { $0.failure = nil }
            consumer.resume(throwing: error)
        } else {
            consumer.resume(returning: nil)
        }
    }

    @inlinable public var isFinished: Bool { state.withLockedValue { $0.finished } }

    /// Elements buffered now, not yet taken by the consumer (for tests).
    @inlinable public var bufferedCount: Int { state.withLockedValue { $0.items.count } }

    /// Whether the consumer waits for elements now.
    @inlinable public var hasWaitingConsumer: Bool { state.withLockedValue { $0.consumer != nil } }

    // MARK: Consumer

    /// Everything buffered, waiting while nothing is; nil at the end; throws the finishing error
    /// after the elements sent before it, or `CancellationError` when the consumer's task is
    /// cancelled while it waits.
    @usableFromInline enum Take { case batch([Element], demand: (@Sendable () -> Void)?), end, failure(any Error), wait }

    @inlinable public func nextBatch(isolation actor: isolated (any Actor)? = #isolation) async throws -> [Element]? {
        func take(_ state: inout State) -> Take {
            if !state.items.isEmpty {
                let batch = takeItems(&state)
                let demand = state.producerPaused ? state.onDemand : nil
                state.producerPaused = false
                return .batch(batch, demand: demand)
            }
            guard state.finished else { return .wait }
            if let failure = state.failure {
                state.failure = nil
                return .failure(failure)
            }
            return .end
        }
        switch state.withLockedValue({ take(&$0) }) {
        case .batch(let batch, let demand):
            demand?()
            return batch
        case .end: return nil
        case .failure(let error): throw error
        case .wait: break
        }
        return try await withTaskCancellationHandler(operation: {
            try await withCheckedThrowingContinuation(isolation: actor) { continuation in
                let now = state.withLockedValue { state -> Take in
                    let step = take(&state)
                    guard case .wait = step else { return step }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    state.consumer = continuation
                    return .wait
                }
                switch now {
                case .batch(let batch, let demand):
                    demand?()
                    continuation.resume(returning: batch)
                case .end: continuation.resume(returning: nil)
                case .failure(let error): continuation.resume(throwing: error)
                case .wait: break
                }
            }
        }, onCancel: {
            self.state.withLockedValue { state in
                defer { state.consumer = nil }
                return state.consumer
            }?.resume(throwing: CancellationError())
        }, isolation: actor)
    }

    /// An iterator that walks each batch locally.
    public struct Iterator {
        @usableFromInline let buffer: InboundBuffer<Element>
        @usableFromInline var batch: [Element] = []
        @usableFromInline var index = 0

        @inlinable public init(_ buffer: InboundBuffer<Element>) { self.buffer = buffer }

        /// The next element, in the caller's isolation: an element of the current batch costs no
        /// hop and no lock, whatever actor the consumer runs on.
        @inlinable public mutating func next(isolation actor: isolated (any Actor)? = #isolation) async throws -> Element? {
            if let element = nextBuffered() { return element }
            batch = []
            index = 0
            guard let next = try await buffer.nextBatch(isolation: actor) else { return nil }
            batch = next
            index = 1
            return batch[0]
        }

        /// The next element of the current batch, without suspending; nil when the batch is done
        /// (``next(isolation:)`` then waits for the next one). For a consumer whose every async
        /// call costs executor switches (a closure of `AsyncThrowingStream(unfolding:)`).
        @inlinable public mutating func nextBuffered() -> Element? {
            guard index < batch.count else { return nil }
            defer { index += 1 }
            return batch[index]
        }

        /// What is left of the current batch, else the next batch (what one read brought, at
        /// least one element), in the caller's isolation; nil once the buffer ended. A reading
        /// loop goes through a read's elements without an async call per element (one switches
        /// executors even when nothing waits).
        @inlinable public mutating func nextBatch(isolation actor: isolated (any Actor)? = #isolation) async throws -> ArraySlice<Element>? {
            if index < batch.count {
                defer {
                    batch = []
                    index = 0
                }
                return batch[index...]
            }
            batch = []
            index = 0
            guard let next = try await buffer.nextBatch(isolation: actor) else { return nil }
            return next[...]
        }
    }
}

extension InboundBuffer.Iterator: Sendable {}
