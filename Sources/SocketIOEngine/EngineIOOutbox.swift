import DequeModule
import NIOConcurrencyHelpers

/// A group of Engine.IO packets that must go out together and in order (a Socket.IO packet and its
/// attachments, or a control packet), with where it came from so unsent frames can be given back.
struct EngineIOFrame: Sendable {
    var packets: [EngineIOPacket]
    /// The namespace of the Socket.IO packet it carries; nil for Engine.IO control packets and
    /// CONNECT packets, which are not re-sent after a reconnect.
    var requeueNamespace: String?
    /// The ack id of an emit that waits for an ack.
    var ackID: Int? = nil

    /// The bytes the frame takes in a polling payload, with one record separator.
    var pollingSize: Int { packets.reduce(0) { $0 + $1.pollingSize + 1 } }

    /// The bytes of its largest WebSocket message.
    var largestWebSocketMessage: Int {
        packets.reduce(0) { largest, packet in
            switch packet.payload {
            case .binary(let data): max(largest, data.count)
            default: max(largest, packet.pollingSize)
            }
        }
    }
}

/// How many frames written over a WebSocket a session keeps for re-sending after a drop: WebSocket
/// gives no receipt, so a frame written just before a cut may never have reached the server.
public struct ResendWindow: Sendable, Hashable {
    /// Frames kept at most.
    public var frames: Int
    /// Bytes (polling size) kept at most.
    public var bytes: Int

    public init(frames: Int, bytes: Int) {
        self.frames = max(0, frames)
        self.bytes = max(0, bytes)
    }

    /// The last 1,000 frames or 4 MiB written.
    public static let standard = ResendWindow(frames: 1_000, bytes: 4 << 20)
    /// Keep nothing: frames written before a drop are not re-sent (at most once for them).
    public static let disabled = ResendWindow(frames: 0, bytes: 0)
}

/// The ordered send queue of one Engine.IO session: `push` never waits (so synchronous emits keep
/// their order); one writer at a time takes frames out. Pausing holds the writer for the upgrade.
final class EngineIOOutbox: Sendable {
    private struct State {
        var queue: Deque<EngineIOFrame> = []
        /// Frames written over a WebSocket and not confirmed yet, oldest first.
        var written: Deque<EngineIOFrame> = []
        var writtenBytes = 0
        var presumedDelivered = 0
        /// Bytes (polling size) of the application frames (emits, acks) in `queue`.
        var boundedBytes = 0
        /// A bounded push was refused: call `onDrain` once the queue has room again.
        var refusedBounded = false
        var onDrain: (@Sendable () -> Void)?
        var waiter: CheckedContinuation<Void, Never>?
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        var paused = false
        var inFlight = false
        var closed = false
        /// Bumped to retire the current writer (after an upgrade the polling writer stops).
        var writerGeneration = 0
    }

    private let state = NIOLockedValueBox(State())
    let window: ResendWindow
    /// The most bytes (polling size) of application frames the queue holds.
    let limit: Int

    init(window: ResendWindow = .standard, limit: Int = .max) {
        self.window = window
        self.limit = max(1, limit)
    }

    enum BoundedPush { case queued, full, closed }

    /// Queues an application frame unless the queue already holds `limit` bytes of them (one frame
    /// always fits in an empty queue). After a refusal, `onDrain` is called once the queue is below
    /// half the limit.
    func pushBounded(_ frame: EngineIOFrame) -> BoundedPush {
        let size = frame.pollingSize
        let (result, waiter) = state.withLockedValue { state -> (BoundedPush, CheckedContinuation<Void, Never>?) in
            if state.closed { return (.closed, nil) }
            if state.boundedBytes > 0 && state.boundedBytes + size > limit {
                state.refusedBounded = true
                return (.full, nil)
            }
            state.queue.append(frame)
            state.boundedBytes += size
            defer { state.waiter = nil }
            return (.queued, state.waiter)
        }
        waiter?.resume()
        return result
    }

    /// Called (once per refusal) when a refused bounded push would fit again.
    func setOnDrain(_ callback: @escaping @Sendable () -> Void) {
        state.withLockedValue { $0.onDrain = callback }
    }

    /// Queues a frame. Returns false when the session is over (the caller keeps the frame).
    @discardableResult
    func push(_ frame: EngineIOFrame) -> Bool {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>?? in
            if state.closed { return .none }
            state.queue.append(frame)
            if frame.requeueNamespace != nil { state.boundedBytes += frame.pollingSize }
            defer { state.waiter = nil }
            return .some(state.waiter)
        }
        guard let waiter else { return false }
        waiter?.resume()
        return true
    }

    /// Puts frames that could not be written back at the front.
    func requeueFront(_ frames: [EngineIOFrame]) {
        state.withLockedValue { state in
            for frame in frames.reversed() {
                state.queue.prepend(frame)
                if frame.requeueNamespace != nil { state.boundedBytes += frame.pollingSize }
            }
        }
    }

    /// Takes the next frames for writer `generation`: all queued frames up to `maxBytes` (polling
    /// size) and `maxPackets` packets, at least one frame. Waits while empty or paused. Returns nil when the session is closed or
    /// the writer was retired. Call ``finishedWrite()`` after writing them.
    func take(maxBytes: Int, maxPackets: Int = .max, generation: Int) async -> [EngineIOFrame]? {
        while true {
            enum Step { case frames([EngineIOFrame]), framesAndDrain([EngineIOFrame], @Sendable () -> Void), stop, wait }
            let step = state.withLockedValue { state -> Step in
                if state.closed || state.writerGeneration != generation { return .stop }
                if state.paused || state.queue.isEmpty { return .wait }
                var frames: [EngineIOFrame] = []
                var total = 0
                var packets = 0
                while let first = state.queue.first {
                    let size = maxBytes == .max ? 0 : first.pollingSize
                    if !frames.isEmpty && (total + size > maxBytes || packets + first.packets.count > maxPackets) { break }
                    frames.append(state.queue.removeFirst())
                    total += size
                    packets += first.packets.count
                }
                for frame in frames where frame.requeueNamespace != nil {
                    state.boundedBytes = max(0, state.boundedBytes - frame.pollingSize)
                }
                state.inFlight = true
                if state.refusedBounded, state.boundedBytes <= limit / 2, let onDrain = state.onDrain {
                    state.refusedBounded = false
                    return .framesAndDrain(frames, onDrain)
                }
                return .frames(frames)
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

    func finishedWrite() {
        state.withLockedValue { $0.inFlight = false }
        wakeIdleWaiters()
    }

    private func wakeWriter() {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Holds the writer and waits until no write is in flight (or the task is cancelled).
    func pauseAndDrain() async {
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

    private func wakeIdleWaiters() {
        let waiters = state.withLockedValue { state -> [CheckedContinuation<Void, Never>] in
            defer { state.idleWaiters = [] }
            return state.idleWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Ends the pause; with `retireWriter`, the current writer stops and a new one takes over.
    /// Returns the generation the next writer must use.
    @discardableResult
    func resume(retireWriter: Bool) -> Int {
        let (generation, waiter) = state.withLockedValue { state -> (Int, CheckedContinuation<Void, Never>?) in
            state.paused = false
            if retireWriter { state.writerGeneration += 1 }
            defer { state.waiter = nil }
            return (state.writerGeneration, state.waiter)
        }
        waiter?.resume()
        return generation
    }

    var generation: Int { state.withLockedValue { $0.writerGeneration } }

    /// Frames were written over a WebSocket: keep the re-sendable ones until confirmed, within the
    /// window (the oldest leave first, presumed delivered).
    func wroteUnconfirmed(_ frames: some Sequence<EngineIOFrame>) {
        // Frames leaving the window are freed after the lock is released: freeing them under it
        // kept emitting threads waiting on the lock.
        let evicted = state.withLockedValue { state -> [EngineIOFrame] in
            for frame in frames where frame.requeueNamespace != nil {
                state.written.append(frame)
                state.writtenBytes += frame.pollingSize
            }
            var evicted: [EngineIOFrame] = []
            while let oldest = state.written.first,
                state.written.count > window.frames || state.writtenBytes > window.bytes
            {
                evicted.append(state.written.removeFirst())
                state.writtenBytes -= oldest.pollingSize
                state.presumedDelivered += 1
            }
            return evicted
        }
        _ = evicted
    }

    /// The server answered the ack `ackID` of `namespace`: it received that frame, and (one TCP
    /// stream, read in order) every frame written before it.
    func confirm(namespace: String, ackID: Int) {
        let confirmed = state.withLockedValue { state -> [EngineIOFrame] in
            guard let index = state.written.firstIndex(where: { $0.ackID == ackID && $0.requeueNamespace == namespace }) else { return [] }
            let confirmed = Array(state.written[...index])
            for frame in confirmed { state.writtenBytes -= frame.pollingSize }
            state.written.removeFirst(index + 1)
            return confirmed
        }
        _ = confirmed  // freed here, outside the lock
    }

    /// Frames that left the window unconfirmed since the session started.
    var presumedDelivered: Int { state.withLockedValue { $0.presumedDelivered } }

    /// Closes the outbox: pushes fail from now on; writers stop. The frames stay for ``takeUnsent()``.
    func close() {
        let (waiter, idle) = state.withLockedValue { state in
            state.closed = true
            defer {
                state.waiter = nil
                state.idleWaiters = []
            }
            return (state.waiter, state.idleWaiters)
        }
        waiter?.resume()
        for waiter in idle { waiter.resume() }
    }

    /// Closes the outbox and returns the frames written but not confirmed, then those never written,
    /// each oldest first.
    func takeUnsent() -> (written: [EngineIOFrame], unwritten: [EngineIOFrame]) {
        close()
        return state.withLockedValue { state in
            defer {
                state.queue = []
                state.written = []
                state.writtenBytes = 0
            }
            return (Array(state.written), Array(state.queue))
        }
    }
}
