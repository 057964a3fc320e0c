import NIOConcurrencyHelpers
import NIOCore
@_spi(RealtimeEngine) import RealtimeCore
import Tracing

/// One encoded hub message in the connection's outbox.
struct HubFrame: OutboxMessage {
    let bytes: [UInt8]
    /// Stateful reconnect's number (types 1 to 5 on a stateful connection), 0 for the rest.
    let sequenceId: Int64
    /// Who waits until the message is written (nil: nobody). Only unnumbered messages have one: a
    /// numbered message may be written twice (a resend), a waiter is answered once.
    let sender: Sender?
    /// The sender's trace context, for the POST that carries it (HTTP transports only).
    let context: ServiceContext?

    /// A waiting send: a task suspended in ``HubOutbox/send(_:)``, or a reply awaited later.
    enum Sender: Sendable {
        case task(CheckedContinuation<Void, any Error>)
        case reply(OneShot<Void>)

        func resume() {
            switch self {
            case .task(let continuation): continuation.resume()
            case .reply(let reply): reply.complete(.success(()))
            }
        }

        func resume(throwing error: any Error) {
            switch self {
            case .task(let continuation): continuation.resume(throwing: error)
            case .reply(let reply): reply.complete(.failure(error))
            }
        }
    }

    init(bytes: [UInt8], sequenceId: Int64, sender: Sender? = nil, context: ServiceContext? = nil) {
        self.bytes = bytes
        self.sequenceId = sequenceId
        self.sender = sender
        self.context = context
    }

    var outboxSize: Int { bytes.count }
    var outboxParts: Int { 1 }
    /// Numbered messages are kept after they are written, until the server acknowledges them.
    var isApplicationData: Bool { sequenceId != 0 }
}

/// A hub connection's outgoing messages, on RealtimeCore's ``Outbox``, for every transport: a
/// WebSocket writes them from its event loop as they are queued (one frame each, everything
/// queued in one flush); Server-Sent Events and Long Polling POST everything queued while the
/// previous POST was in flight in the next one. With stateful reconnect (``ReplayBuffer``) one
/// outbox outlives the WebSockets of the connection: numbered messages stay after they are written
/// until the server acknowledges them, and go out again on the next WebSocket.
///
/// A send is never dropped unseen: it returns once written, or throws why it will not be (the
/// write failed, the connection ended first).
final class HubOutbox: Sendable {
    let queue: Outbox<HubFrame>
    let replay: ReplayBuffer?
    /// Sends carry their task's trace context to the POST that carries them.
    let propagatesContext: Bool
    private let closedWith = NIOLockedValueBox<RealtimeError?>(nil)

    init(replay: ReplayBuffer?, propagatesContext: Bool = false) {
        self.replay = replay
        self.propagatesContext = propagatesContext
        // Kept until acknowledged, however many: the replay buffer's byte limit bounds them.
        queue = Outbox(window: replay == nil ? .disabled : ResendWindow(frames: .max, bytes: .max))
    }

    private var closedError: RealtimeError {
        closedWith.withLockedValue { $0 } ?? RealtimeError(.connectionClosed, "the connection was lost before the message was sent")
    }

    /// Queues `bytes` and returns once they were written (a WebSocket frame, or a POST answered
    /// 2xx); throws when that write failed or the connection ended first.
    func send(_ bytes: [UInt8]) async throws {
        let context = propagatesContext ? ServiceContext.current : nil
        try await withCheckedThrowingContinuation { (sender: CheckedContinuation<Void, any Error>) in
            if !queue.push(HubFrame(bytes: bytes, sequenceId: 0, sender: .task(sender), context: context)) {
                sender.resume(throwing: closedError)
            }
        }
    }

    /// Queues `bytes` now; the reply completes once they were written, or fails why not.
    func queueAwaitingWrite(_ bytes: [UInt8]) -> OneShot<Void> {
        let reply = OneShot<Void>()
        if !queue.push(HubFrame(bytes: bytes, sequenceId: 0, sender: .reply(reply))) { reply.complete(.failure(closedError)) }
        return reply
    }

    /// Queues `bytes` without waiting for the write; throws when the connection is closed. For a
    /// message whose answer is awaited anyway (an invocation): a failed write ends the connection,
    /// which fails the call.
    func enqueue(_ bytes: [UInt8]) throws(RealtimeError) {
        let context = propagatesContext ? ServiceContext.current : nil
        if !queue.push(HubFrame(bytes: bytes, sequenceId: 0, context: context)) { throw closedError }
    }

    /// Queues `bytes` without waiting (a Ping, an Ack). False once the connection is closed.
    @discardableResult
    func post(_ bytes: [UInt8]) -> Bool {
        queue.push(HubFrame(bytes: bytes, sequenceId: 0))
    }

    /// A writer for a new WebSocket (it retires the previous socket's writer); `start()` it once
    /// what must go first (the handshake, or a resume's rewind) is done. A failed write closes the
    /// channel, which ends the reader.
    func webSocketWriter(_ loopWriter: WebSocketLoopWriter, binary: Bool) -> OutboxWebSocketWriter<HubFrame> {
        let generation = queue.resume(retireWriter: true)
        return OutboxWebSocketWriter(
            outbox: queue, writer: loopWriter, generation: generation,
            encode: { frame, messages in
                // Messages queued together share a frame (up to 1 MiB), as the protocol allows
                // (0x1E-terminated JSON, length-prefixed MessagePack): 1,000 concurrent invocations
                // cost the server a few frames, not 1,000.
                if let last = messages.indices.last, messages[last].byteCount + frame.bytes.count <= Self.maximumFrameSize {
                    messages[last].appendHubMessage(frame.bytes)
                } else {
                    messages.append(binary ? .binary(ByteBuffer(bytes: frame.bytes)) : .text(String(decoding: frame.bytes, as: UTF8.self)))
                }
            },
            written: { [self] written, unwritten, failure in
                settle(written, unwritten, failure)
                if failure != nil { loopWriter.closeChannel() }
            })
    }

    /// The largest frame that carries several messages (a larger message goes alone).
    static let maximumFrameSize = 1 << 20

    /// One WebSocket batch's outcome, on the event loop. Written: their senders return; numbered
    /// ones stay until acknowledged. Unwritten after a failure: numbered ones go back first in line
    /// for the next WebSocket, the rest fail (a Ping or an Ack is not replayed).
    private func settle(_ written: ArraySlice<HubFrame>, _ unwritten: ArraySlice<HubFrame>, _ failure: (any Error)?) {
        for frame in written { frame.sender?.resume() }
        if let replay {
            queue.wroteUnconfirmed(written)
            replay.written(written, in: queue)
        }
        if let failure {
            let error = WebSocketLoopWriter.closedError(failure)
            var kept: [HubFrame] = []
            for frame in unwritten {
                if replay != nil, frame.isApplicationData { kept.append(frame) } else { frame.sender?.resume(throwing: error) }
            }
            if !kept.isEmpty { queue.requeueFront(kept) }
        }
        queue.finishedWrite()
    }

    /// Server-Sent Events and Long Polling: POSTs what is queued (up to 1 MiB per request, a larger
    /// message alone), one request at a time, until the task is cancelled or the outbox closed. A
    /// failed POST fails the sends it carried (``postFailure(_:)``: unless the server answered
    /// with a status, they may have arrived); the next one is tried for what comes after. A POST
    /// carries the trace context of the first send in it.
    func postLoop(_ post: @escaping @Sendable (ByteBuffer) async throws -> Void) async {
        let generation = queue.generation
        while let batch = await queue.take(maxBytes: 1 << 20, generation: generation) {
            var body = ByteBuffer()
            body.reserveCapacity(batch.reduce(0) { $0 + $1.bytes.count })
            for frame in batch { body.writeBytes(frame.bytes) }
            do {
                if let context = batch.first?.context {
                    try await ServiceContext.withValue(context) { try await post(body) }
                } else {
                    try await post(body)
                }
                for frame in batch { frame.sender?.resume() }
            } catch {
                let failure = Self.postFailure(error)
                for frame in batch { frame.sender?.resume(throwing: failure) }
            }
            queue.finishedWrite()
        }
    }

    /// Why the sends of a failed POST failed. A status the server answered is its refusal; any
    /// other failure (a reset, a timeout, the session ending with the POST in flight) came after the
    /// request may have reached the server: `connectionClosed`, saying so.
    static func postFailure(_ error: any Error) -> RealtimeError {
        if let error = error as? RealtimeError, error.status != nil { return error }
        return RealtimeError(
            .connectionClosed, "the POST carrying the message failed before the server answered; the server may have received it",
            underlying: error)
    }

    /// The connection is over: what was never written fails with `error`, sends wait no more,
    /// and new sends fail at once.
    func close(_ error: RealtimeError) {
        closedWith.withLockedValue { if $0 == nil { $0 = error } }
        let unsent = queue.takeUnsent()
        for frame in unsent.unwritten { frame.sender?.resume(throwing: error) }
        replay?.fail(error)
    }
}

extension HubConnection {
    /// Every outgoing message goes through here into the session's outbox. Returns once it was
    /// written, or with `awaitingWrite` false once it is queued (a call whose completion is
    /// awaited: a failed write ends the connection, and that fails the call). With stateful
    /// reconnect, a numbered message returns once it is queued (it is kept until the server
    /// acknowledges it, across WebSockets), after waiting for room when the unacknowledged bytes
    /// are at the limit.
    func transmit(_ message: HubMessage, on session: Session, awaitingWrite: Bool = true) async throws {
        let bytes = codec.encode(message)
        let outbox = session.outbox
        if let replay = outbox.replay {
            if message.isSequenced {
                // Room first: a send that waits is not numbered or queued.
                if let wait = replay.admit(bytes.count) { try await wait.value() }
                try replay.enqueue(bytes, in: outbox.queue)
            } else if !replay.isReconnecting {
                // Pings, Acks: only on a live socket, never replayed.
                try await outbox.send(bytes)
            } else {
                return
            }
        } else if awaitingWrite {
            try await outbox.send(bytes)
        } else {
            try outbox.enqueue(bytes)
        }
        state.withLockedValue { $0.machine.didSend(now: timers.now) }
        metrics.sent(messages: 1, bytes: bytes.count)
    }

    /// Queues a Ping or an Ack without waiting for its write (from a timer, which must not wait on
    /// a socket). Nothing while a stateful connection is between WebSockets.
    func transmitNow(_ message: HubMessage, on session: Session) {
        let outbox = session.outbox
        guard outbox.replay?.isReconnecting != true else { return }
        let bytes = codec.encode(message)
        guard outbox.post(bytes) else { return }
        state.withLockedValue { $0.machine.didSend(now: timers.now) }
        metrics.sent(messages: 1, bytes: bytes.count)
    }
}

extension RealtimeMessage {
    var byteCount: Int {
        switch self {
        case .text(let text): text.utf8.count
        case .binary(let buffer): buffer.readableBytes
        }
    }

    /// Appends one more encoded hub message to this frame, in place (the placeholder assigned first
    /// drops this value's reference, so the storage is not copied).
    mutating func appendHubMessage(_ bytes: [UInt8]) {
        switch self {
        case .text(var text):
            self = .binary(ByteBuffer())
            text.append(String(decoding: bytes, as: UTF8.self))
            self = .text(text)
        case .binary(var buffer):
            self = .text("")
            buffer.writeBytes(bytes)
            self = .binary(buffer)
        }
    }
}
