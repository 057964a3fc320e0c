import DequeModule
import NIOConcurrencyHelpers

/// A group of Engine.IO packets that must go out together and in order (a Socket.IO packet and its
/// attachments, or a control packet), with where it came from so unsent frames can be given back.
struct EngineIOFrame: Sendable {
    var packets: [EngineIOPacket]
    /// The namespace of the Socket.IO packet it carries; nil for Engine.IO control packets and
    /// CONNECT packets, which are not re-sent after a reconnect.
    var requeueNamespace: String?

    var pollingSize: Int { packets.reduce(0) { $0 + $1.pollingSize + 1 } }
}

/// The ordered send queue of one Engine.IO session: `push` never waits (so synchronous emits keep
/// their order); one writer at a time takes frames out. Pausing holds the writer for the upgrade.
final class EngineIOOutbox: Sendable {
    private struct State {
        var queue: Deque<EngineIOFrame> = []
        var waiter: CheckedContinuation<Void, Never>?
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        var paused = false
        var inFlight = false
        var closed = false
        /// Bumped to retire the current writer (after an upgrade the polling writer stops).
        var writerGeneration = 0
    }

    private let state = NIOLockedValueBox(State())

    /// Queues a frame. Returns false when the session is over (the caller keeps the frame).
    @discardableResult
    func push(_ frame: EngineIOFrame) -> Bool {
        let waiter = state.withLockedValue { state -> CheckedContinuation<Void, Never>?? in
            if state.closed { return .none }
            state.queue.append(frame)
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
            for frame in frames.reversed() { state.queue.prepend(frame) }
        }
    }

    /// Takes the next frames for writer `generation`: all queued frames up to `maxBytes` (polling
    /// size), at least one. Waits while empty or paused. Returns nil when the session is closed or
    /// the writer was retired. Call ``finishedWrite()`` after writing them.
    func take(maxBytes: Int, generation: Int) async -> [EngineIOFrame]? {
        while true {
            enum Step { case frames([EngineIOFrame]), stop, wait }
            let step = state.withLockedValue { state -> Step in
                if state.closed || state.writerGeneration != generation { return .stop }
                if state.paused || state.queue.isEmpty { return .wait }
                var frames: [EngineIOFrame] = []
                var total = 0
                while let first = state.queue.first {
                    let size = maxBytes == .max ? 0 : first.pollingSize
                    if !frames.isEmpty && total + size > maxBytes { break }
                    frames.append(state.queue.removeFirst())
                    total += size
                }
                state.inFlight = true
                return .frames(frames)
            }
            switch step {
            case .frames(let frames): return frames
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

    /// Closes the outbox and returns every frame not written.
    func close() -> [EngineIOFrame] {
        let (frames, waiter, idle) = state.withLockedValue { state in
            state.closed = true
            defer {
                state.queue = []
                state.waiter = nil
                state.idleWaiters = []
            }
            return (Array(state.queue), state.waiter, state.idleWaiters)
        }
        waiter?.resume()
        for waiter in idle { waiter.resume() }
        return frames
    }
}
