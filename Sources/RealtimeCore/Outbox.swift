public import DequeModule
#if canImport(FoundationEssentials)
public import FoundationEssentials
#else
public import Foundation
#endif
public import NIOConcurrencyHelpers

/// What an ``Outbox`` needs to know of a message.
@_spi(RealtimeEngine) public protocol OutboxMessage: Sendable {
    /// The bytes it takes as the protocol counts them (limits and batch sizes).
    var outboxSize: Int { get }
    /// The parts it adds to a batch (Engine.IO packets; 1 for most protocols).
    var outboxParts: Int { get }
    /// An application message: counted toward the limit, and kept in the resend window after it is
    /// written. Control messages (pings, handshakes, close) are neither.
    var isApplicationData: Bool { get }
    /// The key under which the message is counted when it leaves the resend window unconfirmed
    /// (``Outbox/evictedUnconfirmed``): a message the protocol would have sent again after a drop,
    /// which it can no longer name. Nil (the default): not counted.
    var evictionKey: String? { get }
}

extension OutboxMessage {
    /// Not counted when it leaves the resend window.
    @inlinable
    public var evictionKey: String? { nil }
}

/// How many messages written over a connection that gives no receipt (WebSocket) a client keeps
/// for sending again after a drop: one written just before a cut may never have reached the server.
public struct ResendWindow: Sendable, Hashable {
    /// Messages kept at most.
    public var frames: Int
    /// Bytes kept at most.
    public var bytes: Int

    /// A window of at most `frames` frames and `bytes` bytes.
    public init(frames: Int, bytes: Int) {
        self.frames = max(0, frames)
        self.bytes = max(0, bytes)
    }

    /// The last 1,000 messages or 4 MiB written.
    public static let standard = ResendWindow(frames: 1_000, bytes: 4 << 20)
    /// Keep nothing: messages written before a drop are not sent again (at most once for them).
    public static let disabled = ResendWindow(frames: 0, bytes: 0)
}

/// What an outbox with a capacity (an offline queue) does when that many messages wait.
public struct OverflowPolicy: Hashable, Sendable {
    enum Base: Hashable, Sendable {
        case rejectNewest
        case dropOldest
    }
    let base: Base

    /// The new message is refused and the caller gets ``RealtimeError/Code/queueFull``.
    public static let rejectNewest = OverflowPolicy(base: .rejectNewest)
    /// The oldest message is removed to make room and handed back to the caller to report.
    public static let dropOldest = OverflowPolicy(base: .dropOldest)
}

/// The one outgoing queue every client uses: `push` never waits (so synchronous sends keep their
/// order), and one writer per connection takes everything queued in one batch (one frame or one
/// POST carries it). Pausing holds the writer (an upgrade from polling to WebSocket); a writer's
/// generation retires it.
///
/// Application messages count toward a limit (``pushBounded(_:)`` refuses past it) and, with a
/// ``ResendWindow``, stay after they are written until the protocol confirms them (an ack) or they
/// leave the window: after a drop, ``takeUnsent()`` hands back what may not have arrived, then what
/// was never written. Control messages (pings, handshakes) are never counted or kept.
///
/// The same type is the offline queue (messages kept while the peer cannot take them, 100 by
/// default): with a `capacity`, ``pushCounted(_:)`` applies the ``OverflowPolicy`` and hands back
/// what it refused or dropped; ``takeQueued()`` moves what waits into a connection's outbox once
/// it can take it; ``takeBack(written:unwritten:)`` takes back what a cut connection did not
/// deliver for sure and, past the capacity, drops the messages likeliest to have arrived first,
/// naming every one it dropped.
@_spi(RealtimeEngine) public final class Outbox<Message: OutboxMessage>: Sendable {
    // @usableFromInline and @inlinable below: the per-message calls are specialized for each
    // protocol's message type in its own module (unspecialized, an ack's `confirm` spent most of its
    // time looking up generic metadata). That is why the outbox is public, as SPI: an @inlinable
    // `package` body is not used by other modules.
    @usableFromInline
    struct State: Sendable {
        @usableFromInline var queue: Deque<Message> = []
        /// Application messages written and not confirmed yet, oldest first.
        @usableFromInline var written: Deque<Message> = []
        @usableFromInline var writtenBytes = 0
        /// Messages with an eviction key that left the window since the last confirmation of a
        /// written message, counted by key. A list searched from the newest key, not a dictionary:
        /// a burst past the window evicts a message per write, nearly always with the key of the one
        /// before it, and a comparison of two short strings costs less than hashing one.
        @usableFromInline var evictedUnconfirmed: [EvictedCount] = []
        /// Bytes (polling size) of the application frames (emits, acks) in `queue`.
        @usableFromInline var boundedBytes = 0
        /// A bounded push was refused: call `onDrain` once the queue has room again.
        @usableFromInline var refusedBounded = false
        @usableFromInline var onDrain: (@Sendable () -> Void)?
        @usableFromInline var waiter: CheckedContinuation<Void, Never>?
        /// A writer that runs on an event loop instead of waiting in ``take(maxBytes:maxParts:generation:)``
        /// (``OutboxWebSocketWriter``): told when there is something to take.
        @usableFromInline var wake: (@Sendable () -> Void)?
        /// The wake was called and the writer has not taken since: pushes do not call it again.
        @usableFromInline var wakePending = false
        @usableFromInline var idleWaiters: [CheckedContinuation<Void, Never>] = []
        /// ``waitUntilEmpty()`` calls, woken when nothing is queued or in flight.
        @usableFromInline var emptyWaiters: [UUID: CheckedContinuation<Void, Never>] = [:]
        @usableFromInline var paused = false
        @usableFromInline var inFlight = false
        @usableFromInline var closed = false
        /// Bumped to retire the current writer (after an upgrade the polling writer stops).
        @usableFromInline var writerGeneration = 0

        @usableFromInline
        struct EvictedCount: Sendable {
            @usableFromInline var key: String
            @usableFromInline var count: Int
            @usableFromInline init(key: String, count: Int) {
                self.key = key
                self.count = count
            }
        }

        @inlinable
        mutating func countEviction(_ key: String) {
            if let index = evictedUnconfirmed.lastIndex(where: { $0.key == key }) {
                evictedUnconfirmed[index].count += 1
            } else {
                evictedUnconfirmed.append(EvictedCount(key: key, count: 1))
            }
        }
    }

    @usableFromInline let state = NIOLockedValueBox(State())
    public let window: ResendWindow
    /// The most bytes (polling size) of application frames the queue holds.
    public let limit: Int
    /// The most messages that wait in the queue (``pushCounted(_:)``, ``takeBack(written:unwritten:)``).
    public let capacity: Int
    /// What ``pushCounted(_:)`` does when `capacity` messages wait.
    public let overflow: OverflowPolicy

    /// - Parameters:
    ///   - window: what stays after it is written, until confirmed.
    ///   - limit: the bytes of application messages ``pushBounded(_:)`` admits.
    ///   - capacity: the messages ``pushCounted(_:)`` admits (an offline queue's capacity), at least 0.
    ///   - overflow: what ``pushCounted(_:)`` does past `capacity`.
    package init(window: ResendWindow = .disabled, limit: Int = .max, capacity: Int = .max, overflow: OverflowPolicy = .rejectNewest) {
        self.window = window
        self.limit = max(1, limit)
        self.capacity = max(0, capacity)
        self.overflow = overflow
    }

    public enum BoundedPush: Sendable { case queued, full, closed }

    /// The wake to call after a push, under the lock: once per take, and not while a write is in
    /// flight or the writer is paused (finishing the write, or the resume, takes the next batch).
    @inlinable
    static func wakeAfterPush(_ state: inout State) -> (@Sendable () -> Void)? {
        guard let wake = state.wake, !state.wakePending, !state.inFlight, !state.paused else { return nil }
        state.wakePending = true
        return wake
    }

    /// Has `wake` called when something can be taken (a push, a resume, a close), for a writer that
    /// takes with ``takeNow(maxBytes:maxParts:generation:)`` instead of waiting in ``take(maxBytes:maxParts:generation:)``.
    public func setWake(_ wake: (@Sendable () -> Void)?) {
        state.withLockedValue {
            $0.wake = wake
            $0.wakePending = false
        }
    }

    /// Queues an application frame unless the queue already holds `limit` bytes of them (one frame
    /// always fits in an empty queue). After a refusal, `onDrain` is called once the queue is below
    /// half the limit.
    @inlinable
    public func pushBounded(_ frame: Message, limit: Int? = nil) -> BoundedPush {
        let size = frame.outboxSize
        let limit = limit ?? self.limit
        let (result, waiter, wake) = state.withLockedValue { state -> (BoundedPush, CheckedContinuation<Void, Never>?, (@Sendable () -> Void)?) in
            if state.closed { return (.closed, nil, nil) }
            if state.boundedBytes > 0 && state.boundedBytes + size > limit {
                state.refusedBounded = true
                return (.full, nil, nil)
            }
            state.queue.append(frame)
            state.boundedBytes += size
            defer { state.waiter = nil }
            return (.queued, state.waiter, Self.wakeAfterPush(&state))
        }
        waiter?.resume()
        wake?()
        return result
    }

    /// What ``pushCounted(_:)`` did.
    public enum CountedPush: Sendable {
        /// Queued.
        case queued
        /// `capacity` messages wait and the policy is ``OverflowPolicy/rejectNewest``: not queued.
        case rejected(Message)
        /// `capacity` messages waited and the policy is ``OverflowPolicy/dropOldest``: this one was
        /// removed to make room.
        case droppedOldest(Message)
        /// The outbox is closed: not queued.
        case closed
    }

    /// Queues a message while fewer than `capacity` wait; past it, applies the overflow policy
    /// (nothing is dropped without being handed back).
    public func pushCounted(_ message: Message) -> CountedPush {
        let (result, waiter, wake) = state.withLockedValue { state -> (CountedPush, CheckedContinuation<Void, Never>?, (@Sendable () -> Void)?) in
            if state.closed { return (.closed, nil, nil) }
            var result = CountedPush.queued
            if state.queue.count >= capacity {
                guard overflow == .dropOldest, let oldest = state.queue.popFirst() else { return (.rejected(message), nil, nil) }
                if oldest.isApplicationData { state.boundedBytes = max(0, state.boundedBytes - oldest.outboxSize) }
                result = .droppedOldest(oldest)
            }
            state.queue.append(message)
            if message.isApplicationData { state.boundedBytes += message.outboxSize }
            defer { state.waiter = nil }
            return (result, state.waiter, Self.wakeAfterPush(&state))
        }
        waiter?.resume()
        wake?()
        return result
    }

    /// Takes every queued message, oldest first, for a writer that hands them on (an offline queue
    /// moved into a connection's outbox); what it cannot hand on goes back with ``requeueFront(_:)``.
    package func takeQueued() -> [Message] {
        state.withLockedValue { state in
            defer {
                state.queue.removeAll()
                state.boundedBytes = 0
            }
            return state.queue.arrayOfElements
        }
    }

    /// Calls `body` with each queued message, oldest first, under the outbox's lock (`body` must
    /// not call the outbox).
    package func forEachQueued(_ body: (Message) -> Void) {
        state.withLockedValue { state in
            for message in state.queue { body(message) }
        }
    }

    /// Whether nothing is queued.
    package var isEmpty: Bool { state.withLockedValue { $0.queue.isEmpty } }

    /// Takes back what a cut connection did not deliver for sure, ahead of what waits here:
    /// `written` (sent before the cut, so it may have arrived), then `unwritten`, then what was
    /// queued, each oldest first. When more than `capacity` would wait, the messages likeliest to
    /// have arrived are dropped first (`written`, oldest first), then the overflow policy chooses
    /// among the rest (``OverflowPolicy/rejectNewest``: the newest; ``OverflowPolicy/dropOldest``:
    /// the oldest). Returns the dropped messages, to report each one.
    package func takeBack(written: [Message], unwritten: [Message]) -> [Message] {
        if written.isEmpty && unwritten.isEmpty { return [] }
        return state.withLockedValue { state in
            var written = written
            var rest = unwritten
            rest.append(contentsOf: state.queue)
            var dropped: [Message] = []
            let overWritten = min(written.count, max(0, written.count + rest.count - capacity))
            dropped += written.prefix(overWritten)
            written.removeFirst(overWritten)
            let overRest = max(0, written.count + rest.count - capacity)
            if overRest > 0 {
                if overflow == .dropOldest {
                    dropped += rest.prefix(overRest)
                    rest.removeFirst(overRest)
                } else {
                    dropped += rest.suffix(overRest)
                    rest.removeLast(overRest)
                }
            }
            state.queue = Deque(written + rest)
            state.boundedBytes = state.queue.reduce(0) { $0 + ($1.isApplicationData ? $1.outboxSize : 0) }
            return dropped
        }
    }

    /// Called (once per refusal) when a refused bounded push would fit again.
    package func setOnDrain(_ callback: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.onDrain = callback }
    }

    /// Queues a frame. Returns false when the session is over (the caller keeps the frame).
    @discardableResult
    @inlinable
    public func push(_ frame: Message) -> Bool {
        push(making: { frame })
    }

    /// Queues the frame `make` builds, under the outbox's lock: frames numbered as they are made
    /// keep their numbers' order in the queue, whatever threads push at once. `make` must not
    /// call the outbox. Returns false when the session is over (nothing is made then).
    @discardableResult
    @inlinable
    public func push(making make: () -> Message) -> Bool {
        let woken = state.withLockedValue { state -> (CheckedContinuation<Void, Never>?, (@Sendable () -> Void)?)? in
            if state.closed { return nil }
            let frame = make()
            state.queue.append(frame)
            if frame.isApplicationData { state.boundedBytes += frame.outboxSize }
            defer { state.waiter = nil }
            return (state.waiter, Self.wakeAfterPush(&state))
        }
        guard let woken else { return false }
        woken.0?.resume()
        woken.1?()
        return true
    }

    /// Puts frames that could not be written back at the front.
    @inlinable
    public func requeueFront(_ frames: [Message]) {
        state.withLockedValue { state in
            for frame in frames.reversed() {
                state.queue.prepend(frame)
                if frame.isApplicationData { state.boundedBytes += frame.outboxSize }
            }
        }
    }

    /// Takes the next frames for writer `generation`: all queued frames up to `maxBytes` (polling
    /// size) and `maxParts` packets, at least one frame. Waits while empty or paused. Returns nil when the session is closed or
    /// the writer was retired. Call ``finishedWrite()`` after writing them.
    @usableFromInline enum Step { case frames([Message]), framesAndDrain([Message], @Sendable () -> Void), stop, wait }

    /// The next batch for writer `generation`, under the lock (see ``take(maxBytes:maxParts:generation:)``).
    @inlinable
    func nextBatch(maxBytes: Int, maxParts: Int, generation: Int, _ state: inout State) -> Step {
        if state.closed || state.writerGeneration != generation { return .stop }
        if state.paused || state.queue.isEmpty { return .wait }
        var frames: [Message]
        if maxBytes == .max && maxParts == .max {
            // Everything, in one copy: element by element, an unspecialized caller (a writer
            // generic over the message type) allocated for each element it looked at.
            frames = Array(state.queue)
            state.queue.removeAll(keepingCapacity: true)
        } else {
            frames = []
            var total = 0
            var parts = 0
            while let first = state.queue.first {
                let size = maxBytes == .max ? 0 : first.outboxSize
                if !frames.isEmpty && (total + size > maxBytes || parts + first.outboxParts > maxParts) { break }
                frames.append(state.queue.removeFirst())
                total += size
                parts += first.outboxParts
            }
        }
        for frame in frames where frame.isApplicationData {
            state.boundedBytes = max(0, state.boundedBytes - frame.outboxSize)
        }
        state.inFlight = true
        if state.refusedBounded, state.boundedBytes <= limit / 2, let onDrain = state.onDrain {
            state.refusedBounded = false
            return .framesAndDrain(frames, onDrain)
        }
        return .frames(frames)
    }

    /// Like ``take(maxBytes:maxParts:generation:)`` without waiting: nil when there is nothing to
    /// take now (empty, paused), the outbox is closed or the writer retired. The wake set with
    /// ``setWake(_:)`` tells when to ask again.
    @inlinable
    public func takeNow(maxBytes: Int, maxParts: Int = .max, generation: Int) -> [Message]? {
        let step = state.withLockedValue { state -> Step in
            state.wakePending = false
            return nextBatch(maxBytes: maxBytes, maxParts: maxParts, generation: generation, &state)
        }
        switch step {
        case .frames(let frames): return frames
        case .framesAndDrain(let frames, let onDrain):
            onDrain()
            return frames
        case .stop, .wait: return nil
        }
    }

    @inlinable
    public func take(maxBytes: Int, maxParts: Int = .max, generation: Int) async -> [Message]? {
        while true {
            let step = state.withLockedValue { state -> Step in
                nextBatch(maxBytes: maxBytes, maxParts: maxParts, generation: generation, &state)
            }
            switch step {
            case .frames(let frames): return frames
            case .framesAndDrain(let frames, let onDrain):
                onDrain()
                return frames
            case .stop: return nil
            case .wait:
                if Task.isCancelled { return nil }
                await withTaskCancellationHandler {
                    await withCheckedContinuation { continuation in
                        let resumeNow = state.withLockedValue { state -> Bool in
                            if state.closed || state.writerGeneration != generation || (!state.paused && !state.queue.isEmpty) {
                                return true
                            }
                            state.waiter = continuation
                            return false
                        }
                        if resumeNow { continuation.resume() }
                    }
                } onCancel: {
                    self.wakeWriter()
                }
                if Task.isCancelled { return nil }
            }
        }
    }

    @inlinable
    public func finishedWrite() {
        let empty = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            state.inFlight = false
            guard state.queue.isEmpty else { return [] }
            defer { state.emptyWaiters = [:] }
            return Array(state.emptyWaiters.values)
        }
        wakeIdleWaiters()
        for waiter in empty { waiter.resume() }
    }

    /// Returns when nothing is queued and no write is in flight (everything written went out), the
    /// outbox is closed, or the waiting task is cancelled.
    package func waitUntilEmpty() async {
        let id = UUID()
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let empty = state.withLockedValue { state -> Bool in
                    if state.closed || Task.isCancelled || (state.queue.isEmpty && !state.inFlight) { return true }
                    state.emptyWaiters[id] = continuation
                    return false
                }
                if empty { continuation.resume() }
            }
        } onCancel: {
            self.state.withLockedValue { $0.emptyWaiters.removeValue(forKey: id) }?.resume()
        }
    }

    @usableFromInline
    func wakeWriter() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Holds the writer and waits until no write is in flight (or the task is cancelled).
    package func pauseAndDrain() async {
        state.withLockedValue { $0.paused = true }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let idle = state.withLockedValue { state -> Bool in
                    if !state.inFlight || state.closed { return true }
                    state.idleWaiters.append(continuation)
                    return false
                }
                if idle { continuation.resume() } else if Task.isCancelled { wakeIdleWaiters() }
            }
        } onCancel: {
            self.wakeIdleWaiters()
        }
    }

    @usableFromInline
    func wakeIdleWaiters() {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            defer { state.idleWaiters = [] }
            return state.idleWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Ends the pause; with `retireWriter`, the current writer stops and a new one takes over.
    /// Returns the generation the next writer must use.
    @discardableResult
    package func resume(retireWriter: Bool) -> Int {
        let (generation, waiter, wake) = state.withLockedValue { state -> (Int, CheckedContinuation<Void, Never>?, (@Sendable () -> Void)?) in
            state.paused = false
            if retireWriter { state.writerGeneration += 1 }
            defer { state.waiter = nil }
            return (state.writerGeneration, state.waiter, state.queue.isEmpty ? nil : Self.wakeAfterPush(&state))
        }
        waiter?.resume()
        wake?()
        return generation
    }

    @inlinable
    public var generation: Int { state.withLockedValue { $0.writerGeneration } }

    /// Frames were written to a connection (a WebSocket, or a request that failed after it may have
    /// been read): keep the re-sendable ones until confirmed, within the
    /// window (the oldest leave first; those with an eviction key are counted, ``evictedUnconfirmed``).
    @inlinable
    public func wroteUnconfirmed(_ frames: some Sequence<Message>) {
        // Frames leaving the window are freed after the lock is released: freeing them under it
        // kept emitting threads waiting on the lock.
        let evicted = state.withLockedValue { state -> [Message] in
            for frame in frames where frame.isApplicationData {
                state.written.append(frame)
                state.writtenBytes += frame.outboxSize
            }
            var evicted: [Message] = []
            while let oldest = state.written.first,
                state.written.count > window.frames || state.writtenBytes > window.bytes
            {
                evicted.append(state.written.removeFirst())
                state.writtenBytes -= oldest.outboxSize
                if let key = oldest.evictionKey { state.countEviction(key) }
            }
            return evicted
        }
        _ = evicted
    }

    /// The peer confirmed the first written message that matches (an ack): it received it, and (one
    /// TCP stream, read in order) every message written before it.
    @inlinable
    public func confirm(where matches: (Message) -> Bool) {
        let confirmed = state.withLockedValue { state -> (oldest: Message?, more: [Message]) in
            guard let index = state.written.firstIndex(where: matches) else { return (nil, []) }
            // Everything written before it arrived, the messages that left the window included.
            if !state.evictedUnconfirmed.isEmpty { state.evictedUnconfirmed = [] }
            if index == 0 {
                // Acks in the order of their emits: the oldest is confirmed alone (no array).
                let oldest = state.written.removeFirst()
                state.writtenBytes -= oldest.outboxSize
                return (oldest, [])
            }
            let confirmed = Array(state.written[...index])
            for frame in confirmed { state.writtenBytes -= frame.outboxSize }
            state.written.removeFirst(index + 1)
            return (nil, confirmed)
        }
        _ = confirmed  // freed here, outside the lock
    }

    /// The peer confirmed every written message from the oldest on while `isConfirmed` holds (an
    /// acknowledgement of everything through a sequence number). Returns the bytes they held.
    @inlinable
    @discardableResult
    public func confirmOldest(while isConfirmed: (Message) -> Bool) -> Int {
        let (confirmed, bytes) = state.withLockedValue { state -> ([Message], Int) in
            var count = 0
            var bytes = 0
            for frame in state.written {
                guard isConfirmed(frame) else { break }
                count += 1
                bytes += frame.outboxSize
            }
            guard count > 0 else { return ([], 0) }
            if !state.evictedUnconfirmed.isEmpty { state.evictedUnconfirmed = [] }
            let confirmed = Array(state.written.prefix(count))
            state.written.removeFirst(count)
            state.writtenBytes -= bytes
            return (confirmed, bytes)
        }
        _ = confirmed  // freed here, outside the lock
        return bytes
    }

    /// A new connection takes over a session whose peer keeps what it received (a resume): the
    /// written, unconfirmed messages go back to the front of the queue, oldest first, after the
    /// control message `lead` makes from the oldest message that may not have arrived (the first
    /// written one, else the first queued application message, else nil). Messages queued
    /// meanwhile stay after them.
    package func rewind(lead: (_ oldestUnconfirmed: Message?) -> Message) {
        state.withLockedValue { state in
            let oldest = state.written.first ?? state.queue.first(where: \.isApplicationData)
            for frame in state.written.reversed() {
                state.queue.prepend(frame)
                state.boundedBytes += frame.outboxSize
            }
            state.queue.prepend(lead(oldest))
            state.written = []
            state.writtenBytes = 0
        }
    }

    /// Messages that left the window and were not confirmed since (a later message in the window
    /// confirmed clears them), counted by their ``OutboxMessage/evictionKey``. After a drop, these
    /// are the messages the server may not have that can no longer be sent again or named. A
    /// confirmation of a message that had itself left the window is not seen (it is no longer
    /// held), so the count can include messages that did arrive.
    package var evictedUnconfirmed: [String: Int] {
        let counts = state.withLockedValue { $0.evictedUnconfirmed }
        return Dictionary(counts.map { ($0.key, $0.count) }, uniquingKeysWith: +)
    }

    /// Closes the outbox: pushes fail from now on; writers stop. The frames stay for ``takeUnsent()``.
    package func close() {
        let (waiter, idle) = state.withLockedValue { state in
            state.closed = true
            defer {
                state.waiter = nil
                state.idleWaiters = []
                state.emptyWaiters = [:]
            }
            return (state.waiter, state.idleWaiters + state.emptyWaiters.values)
        }
        waiter?.resume()
        for waiter in idle { waiter.resume() }
    }

    /// Opens a closed outbox again (a client connecting anew after it was closed).
    package func reopen() {
        state.withLockedValue { $0.closed = false }
    }

    /// How many messages wait (not written yet).
    package var queuedCount: Int { state.withLockedValue { $0.queue.count } }

    /// Closes the outbox and returns the frames written but not confirmed, then those never written,
    /// each oldest first.
    package func takeUnsent() -> (written: [Message], unwritten: [Message]) {
        close()
        return state.withLockedValue { state in
            defer {
                state.queue = []
                state.written = []
                state.writtenBytes = 0
            }
            return (state.written.arrayOfElements, state.queue.arrayOfElements)
        }
    }
}

extension Deque {
    /// The elements as an array. An empty deque gives `[]` without copying: the standard library's
    /// copy of zero elements writes a zero into the shared empty-array storage, which
    /// ThreadSanitizer reports as a data race whenever two threads do it (the value never changes,
    /// but every TSan run of the suite listed it from Socket.IO's and the outbox's session ends).
    package var arrayOfElements: [Element] { isEmpty ? [] : Array(self) }
}
