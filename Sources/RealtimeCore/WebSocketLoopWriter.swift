package import NIOCore
import NIOWebSocket

/// Writes whole messages on a WebSocket's event loop, beside swift-websocket's writer: a protocol
/// whose messages wait in an ``Outbox`` has them written as they are queued, with no task waiting
/// for them and no hop through an async writer per message (see ``OutboxWebSocketWriter``).
///
/// Messages go out uncompressed (a connection with permessage-deflate has no loop writer: its
/// frames pass through the extension in swift-websocket's writer), masked with a key from a
/// buffered system random source, and never after our close frame. Writes from both writers keep
/// their order on the event loop; control frames may come between two messages, as the protocol
/// allows.
package final class WebSocketLoopWriter: Sendable {
    private let handler: NIOLoopBound<LoopWriteHandler>
    /// The connection's event loop: ``write(_:completion:)`` and ``whenWritable(_:)`` run there.
    package var eventLoop: any EventLoop { loop }
    private let loop: any EventLoop

    fileprivate init(_ handler: LoopWriteHandler, eventLoop: any EventLoop) {
        self.handler = NIOLoopBound(handler, eventLoop: eventLoop)
        self.loop = eventLoop
    }

    /// Whether the socket takes more now (on the event loop). False once the channel is closed.
    package var isWritable: Bool { handler.value.isWritable }

    /// Whether nothing more can be written: the channel is closed or our close frame went out (on
    /// the event loop). A write now fails at once.
    package var isClosed: Bool { handler.value.isClosed }

    /// Writes `messages` as one text or binary frame each and flushes (on the event loop). Calls
    /// `completion` once, on the event loop, with how many of them were written before the first
    /// that failed (all of them on success) and that failure.
    package func write(_ messages: [RealtimeMessage], completion: @escaping (_ written: Int, _ failure: (any Error)?) -> Void) {
        handler.value.write(messages, completion: completion)
    }

    /// Writes one message from any thread and returns once the socket took it (while the socket is
    /// full, that waits: the backpressure). Throws `connectionClosed` when the connection closed first.
    package func send(_ message: RealtimeMessage) async throws {
        let handler = handler
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let write: @Sendable () -> Void = {
                handler.value.write([message]) { _, failure in
                    if let failure {
                        continuation.resume(throwing: Self.closedError(failure))
                    } else {
                        continuation.resume()
                    }
                }
            }
            if eventLoop.inEventLoop { write() } else { eventLoop.execute(write) }
        }
    }

    package static func closedError(_ error: any Error) -> RealtimeError {
        if let error = error as? RealtimeError { return error }
        return RealtimeError(.connectionClosed, "the WebSocket closed before the message was written", underlying: error)
    }

    /// Calls `callback` (on the event loop) each time the socket becomes writable again.
    package func whenWritable(_ callback: @escaping () -> Void) {
        handler.value.onWritable = callback
    }

    /// Closes the channel (on the event loop): what was written goes first.
    package func closeChannel() {
        handler.value.closeChannel()
    }
}

/// The channel handler behind ``WebSocketLoopWriter``, between the frame codec and the reader.
final class LoopWriteHandler: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    typealias OutboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    private var context: ChannelHandlerContext?
    /// What swift-websocket's writer sent: its close frame, a fragmented message under way.
    private var sent = OutboundFrameTracker()
    fileprivate var onWritable: (() -> Void)?
    private var keys = MaskingKeySource()

    func writer(on eventLoop: any EventLoop) -> WebSocketLoopWriter { WebSocketLoopWriter(self, eventLoop: eventLoop) }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }
    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        onWritable = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        // A writer waiting for room learns that none will come: its next write fails at once.
        let waiting = onWritable
        onWritable = nil
        waiting?()
        context.fireChannelInactive()
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { onWritable?() }
        context.fireChannelWritabilityChanged()
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        sent.wrote(unwrapOutboundIn(data))
        context.write(data, promise: promise)
    }

    var isWritable: Bool { context.map { $0.channel.isWritable && !sent.closeSent } ?? false }

    var isClosed: Bool { context == nil || sent.closeSent }

    func write(_ messages: [RealtimeMessage], completion: @escaping (Int, (any Error)?) -> Void) {
        guard let context, !sent.closeSent, !sent.inMessage else {
            completion(0, RealtimeError(.connectionClosed, "the WebSocket is closing"))
            return
        }
        guard !messages.isEmpty else {
            completion(0, nil)
            return
        }
        if messages.count == 1 {
            // One message (a writer that is never behind writes its messages one by one): its
            // promise answers alone.
            let promise = context.eventLoop.makePromise(of: Void.self)
            promise.futureResult.assumeIsolated().whenComplete { result in
                switch result {
                case .success: completion(1, nil)
                case .failure(let error): completion(0, error)
                }
            }
            context.write(wrapOutboundOut(frame(messages[0], allocator: context.channel.allocator)), promise: promise)
            context.flush()
            return
        }
        // Once every promise has answered: the messages before the first that failed were
        // written. Promises need not answer in write order (a handler may fail a write at once,
        // while the ones before it succeed at the flush).
        let progress = BatchProgress(total: messages.count, completion: completion)
        for (index, message) in messages.enumerated() {
            let promise = context.eventLoop.makePromise(of: Void.self)
            promise.futureResult.assumeIsolated().whenComplete { progress.answer(index, $0) }
            context.write(wrapOutboundOut(frame(message, allocator: context.channel.allocator)), promise: promise)
        }
        context.flush()
    }

    private func frame(_ message: RealtimeMessage, allocator: ByteBufferAllocator) -> WebSocketFrame {
        switch message {
        case .text(let text):
            var buffer = allocator.buffer(capacity: text.utf8.count)
            buffer.writeString(text)
            return WebSocketFrame(fin: true, opcode: .text, maskKey: keys.next(), data: buffer)
        case .binary(let buffer):
            return WebSocketFrame(fin: true, opcode: .binary, maskKey: keys.next(), data: buffer)
        }
    }

    /// The writes of one batch as their promises answer, on the event loop.
    private final class BatchProgress {
        let total: Int
        let completion: (Int, (any Error)?) -> Void
        /// The first message whose write failed, and why.
        var failure: (index: Int, error: any Error)?
        var answered = 0

        init(total: Int, completion: @escaping (Int, (any Error)?) -> Void) {
            self.total = total
            self.completion = completion
        }

        func answer(_ index: Int, _ result: Result<Void, any Error>) {
            answered += 1
            if case .failure(let error) = result, index < failure?.index ?? .max { failure = (index, error) }
            if answered == total { completion(failure?.index ?? total, failure?.error) }
        }
    }

    func closeChannel() {
        context?.close(promise: nil)
    }
}

/// What has been written toward the socket, as a handler between the frame codec and the writers
/// sees it: a message of ours may go out only between two whole messages and before our close frame.
struct OutboundFrameTracker {
    /// Our close frame went out: no data frame may follow it.
    private(set) var closeSent = false
    /// A fragmented message is being written: a frame of another message now would break it.
    private(set) var inMessage = false

    mutating func wrote(_ frame: WebSocketFrame) {
        switch frame.opcode {
        case .connectionClose: closeSent = true
        case .text, .binary, .continuation: inMessage = !frame.fin
        default: break
        }
    }
}

/// Masking keys (RFC 6455 section 5.3: unpredictable, from a strong source) drawn from the system's
/// random source 64 at a time (32 calls of 8 bytes, two keys each), where swift-websocket's writer
/// makes four system calls per frame. Each key is made by swift-nio's inlinable `random(using:)`
/// from its 32 bits: `WebSocketMaskingKey`'s initializer from a collection is generic and not
/// inlinable, and cost eight allocations per key.
struct MaskingKeySource {
    private var pool: [UInt64] = []
    /// Keys taken from `pool` (two per word).
    private var used = 0

    /// Hands out the one word it holds (the low 32 bits are the key).
    private struct Word: RandomNumberGenerator {
        let value: UInt64
        mutating func next() -> UInt64 { value }
    }

    mutating func next() -> WebSocketMaskingKey {
        if used == pool.count * 2 {
            var generator = SystemRandomNumberGenerator()
            if pool.isEmpty { pool = [UInt64](repeating: 0, count: 32) }
            for index in pool.indices { pool[index] = generator.next() }
            used = 0
        }
        let word = pool[used / 2]
        var source = Word(value: used % 2 == 0 ? word : word >> 32)
        used += 1
        return .random(using: &source)
    }
}

/// Writes an ``Outbox`` over a WebSocket from the connection's event loop as messages are queued:
/// the writer of a connection that keeps no task waiting for its messages. One batch is in flight
/// at a time, as with a writing task: take everything queued, encode it, write it in one flush, then
/// hand the batch back (written and unwritten parts) and take the next. While the socket is full it
/// waits for the channel to become writable again (the outbox holds the rest and bounds it).
package final class OutboxWebSocketWriter<Message: OutboxMessage>: Sendable {
    /// The outcome of one batch, on the event loop: the messages written, those not written (from
    /// the first that failed), and the failure.
    package typealias Written = @Sendable (_ written: ArraySlice<Message>, _ unwritten: ArraySlice<Message>, _ failure: (any Error)?) -> Void

    private let outbox: Outbox<Message>
    private let writer: WebSocketLoopWriter
    private let generation: Int
    private let encode: @Sendable (Message, inout [RealtimeMessage]) -> Void
    private let written: Written
    private let inFlight: NIOLoopBoundBox<Bool>

    /// - Parameters:
    ///   - encode: appends the WebSocket messages one outbox message is written as, in order.
    ///   - written: called once per batch, on the event loop; it settles the batch with the outbox
    ///     (`wroteUnconfirmed`, `requeueFront`, `finishedWrite`).
    package init(
        outbox: Outbox<Message>, writer: WebSocketLoopWriter, generation: Int,
        encode: @escaping @Sendable (Message, inout [RealtimeMessage]) -> Void, written: @escaping Written
    ) {
        self.outbox = outbox
        self.writer = writer
        self.generation = generation
        self.encode = encode
        self.written = written
        self.inFlight = NIOLoopBoundBox(false, eventLoop: writer.eventLoop)
    }

    /// Starts writing what is queued, and what is queued from now on.
    package func start() {
        let eventLoop = writer.eventLoop
        outbox.setWake { [weak self] in
            guard let self else { return }
            if eventLoop.inEventLoop { self.drain() } else { eventLoop.execute { self.drain() } }
        }
        eventLoop.execute {
            self.writer.whenWritable { [weak self] in self?.drain() }
            self.drain()
        }
    }

    /// Stops taking from the outbox (a batch in flight still settles).
    package func stop() {
        outbox.setWake(nil)
    }

    /// On the event loop: takes and writes the next batch unless one is in flight or the socket is
    /// full. Once the connection is closed a batch is still taken: its write fails at once and the
    /// `written` callback settles it (a writer that waited for room here, its senders would wait
    /// for a socket that is gone).
    private func drain() {
        guard !inFlight.value, writer.isWritable || writer.isClosed, let batch = outbox.takeNow(maxBytes: .max, generation: generation) else {
            return
        }
        inFlight.value = true
        var messages: [RealtimeMessage] = []
        messages.reserveCapacity(batch.count)
        // ends[i]: how many WebSocket messages the first i + 1 outbox messages make; nil while
        // each made one.
        var ends: [Int]?
        for (index, message) in batch.enumerated() {
            encode(message, &messages)
            if ends == nil, messages.count != index + 1 { ends = Array(1..<(index + 1)) }
            ends?.append(messages.count)
        }
        writer.write(messages) { [self] count, failure in
            let whole = ends.map { $0.firstIndex { $0 > count } ?? batch.count } ?? min(count, batch.count)
            inFlight.value = false
            written(batch[..<whole], batch[whole...], failure)
            if failure == nil { drain() }
        }
    }
}
