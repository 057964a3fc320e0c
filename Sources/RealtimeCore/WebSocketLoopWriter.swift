public import NIOCore
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
@_spi(RealtimeEngine) public final class WebSocketLoopWriter: Sendable {
    private let handler: NIOLoopBound<LoopWriteHandler>
    /// The connection's event loop: ``write(_:completion:)`` and ``whenWritable(_:)`` run there.
    public var eventLoop: any EventLoop { loop }
    private let loop: any EventLoop

    fileprivate init(_ handler: LoopWriteHandler, eventLoop: any EventLoop) {
        self.handler = NIOLoopBound(handler, eventLoop: eventLoop)
        self.loop = eventLoop
    }

    /// Whether the socket takes more now (on the event loop). False once the channel is closed.
    public var isWritable: Bool { handler.value.isWritable }

    /// Whether nothing more can be written: the channel is closed or our close frame went out (on
    /// the event loop). A write now fails at once.
    public var isClosed: Bool { handler.value.isClosed }

    /// Writes `messages` as one text or binary frame each and flushes (on the event loop). Calls
    /// `completion` once, on the event loop, with how many of them were written before the first
    /// that failed (all of them on success) and that failure.
    public func write(_ messages: [RealtimeMessage], completion: @escaping (_ written: Int, _ failure: (any Error)?) -> Void) {
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
    public func whenWritable(_ callback: @escaping () -> Void) {
        handler.value.onWritable = callback
    }

    /// The connection's receive buffer (nil once the channel is gone); see
    /// `SocketConnection.receiveBuffer(of:)`.
    package func receiveBuffer() async throws -> (nextSize: Int, readsPerWakeUp: UInt)? {
        let handler = handler
        guard let channel = try await loop.submit({ handler.value.channel }).get() else { return nil }
        return try await SocketConnection.receiveBuffer(of: channel)
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
    /// The frame encoder's context: our messages, encoded here, are written below it.
    private var encoderContext: ChannelHandlerContext?
    /// What swift-websocket's writer sent: its close frame, a fragmented message under way.
    private var sent = OutboundFrameTracker()
    fileprivate var onWritable: (() -> Void)?
    private var keys = MaskingKeySource()

    /// The channel, while the handler is in its pipeline.
    var channel: (any Channel)? { context?.channel }

    func writer(on eventLoop: any EventLoop) -> WebSocketLoopWriter { WebSocketLoopWriter(self, eventLoop: eventLoop) }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        encoderContext = try? context.pipeline.syncOperations.context(handlerType: MaskingFrameEncoder.self)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        encoderContext = nil
        onWritable = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        encoderContext = nil
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
        guard let context, let encoder = encoderContext, !sent.closeSent, !sent.inMessage else {
            completion(0, RealtimeError(.connectionClosed, "the WebSocket is closing"))
            return
        }
        guard !messages.isEmpty else {
            completion(0, nil)
            return
        }
        // The batch's frames (header, key, masked payload each) are encoded into one buffer, and
        // each frame is written as a slice of it below the frame encoder: no frame value, no
        // buffer of its own and no trip through the handlers above per message. Each slice keeps
        // its own promise, so a write that breaks in the middle still tells which messages went out.
        var size = 0
        for message in messages { size += MaskingFrameEncoder.maskedFrameSize(payload: message.payloadCount) }
        var frames = context.channel.allocator.buffer(capacity: size)
        for message in messages {
            let key = keys.next()
            switch message {
            case .text(var text):
                text.withUTF8 { MaskingFrameEncoder.writeMaskedFrame(opcode: .text, payload: UnsafeRawBufferPointer($0), key: key, into: &frames) }
            case .binary(let payload):
                payload.withUnsafeReadableBytes { MaskingFrameEncoder.writeMaskedFrame(opcode: .binary, payload: $0, key: key, into: &frames) }
            }
        }
        // Write promises answer in write order below the encoder (the socket's writes complete in
        // order, and once one fails every later one fails), so the successes are the messages
        // written, a prefix of the batch. Only the last write's promise has a callback of its own:
        // when it succeeds, every write did. When it fails, the others' answers are collected (a
        // callback added to an answered future runs at once; a handler below may fail a later
        // write before an earlier one answers). A callback per write cost two closures and a run
        // for every message.
        var futures: [EventLoopFuture<Void>] = []
        futures.reserveCapacity(messages.count)
        var offset = frames.readerIndex
        for message in messages {
            let length = MaskingFrameEncoder.maskedFrameSize(payload: message.payloadCount)
            let promise = context.eventLoop.makePromise(of: Void.self)
            futures.append(promise.futureResult)
            encoder.write(NIOAny(frames.getSlice(at: offset, length: length)!), promise: promise)
            offset += length
        }
        futures[futures.count - 1].assumeIsolated().whenComplete { result in
            switch result {
            case .success:
                completion(futures.count, nil)
            case .failure(let error):
                let progress = BatchProgress(total: futures.count, completion: completion)
                progress.answer(.failure(error))
                for future in futures.dropLast() { future.assumeIsolated().whenComplete { progress.answer($0) } }
            }
        }
        encoder.flush()
    }

    /// The writes of a batch whose last write failed, as their promises answer, on the event loop.
    private final class BatchProgress {
        let total: Int
        let completion: (Int, (any Error)?) -> Void
        var succeeded = 0
        /// The first failure answered.
        var failure: (any Error)?
        var answered = 0

        init(total: Int, completion: @escaping (Int, (any Error)?) -> Void) {
            self.total = total
            self.completion = completion
        }

        func answer(_ result: Result<Void, any Error>) {
            answered += 1
            switch result {
            case .success: succeeded += 1
            case .failure(let error): if failure == nil { failure = error }
            }
            if answered == total { completion(succeeded, failure) }
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
/// random source 64 at a time (one request for 256 bytes, kept by every connection that wrote a
/// frame), where swift-websocket's writer makes four system calls per frame. Each key is made by swift-nio's inlinable `random(using:)` from its
/// 32 bits: `WebSocketMaskingKey`'s initializer from a collection is generic and not inlinable, and
/// cost eight allocations per key.
struct MaskingKeySource {
    private static let words = 32
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
            if pool.isEmpty { pool = [UInt64](repeating: 0, count: Self.words) }
            pool.withUnsafeMutableBytes { fillRandom($0) }
            used = 0
        }
        let word = pool[used / 2]
        var source = Word(value: used % 2 == 0 ? word : word >> 32)
        used += 1
        return .random(using: &source)
    }
}

extension RealtimeMessage {
    /// The bytes of its payload: a text's UTF-8, a binary message's readable bytes.
    var payloadCount: Int {
        switch self {
        case .text(let text): text.utf8.count
        case .binary(let buffer): buffer.readableBytes
        }
    }
}

/// Fills `bytes` from the system's random source in one request: the standard library's entry
/// point behind `SystemRandomNumberGenerator` (`getrandom` on Linux, `arc4random_buf` on Apple
/// platforms), which the generator calls for eight bytes at a time.
func fillRandom(_ bytes: UnsafeMutableRawBufferPointer) {
    guard let base = bytes.baseAddress else { return }
    systemRandom(base, bytes.count)
}

@_silgen_name("swift_stdlib_random")
private func systemRandom(_ buffer: UnsafeMutableRawPointer, _ count: Int)

/// Writes an ``Outbox`` over a WebSocket from the connection's event loop as messages are queued:
/// the writer of a connection that keeps no task waiting for its messages. One batch is in flight
/// at a time, as with a writing task: take everything queued, encode it, write it in one flush, then
/// hand the batch back (written and unwritten parts) and take the next. While the socket is full it
/// waits for the channel to become writable again (the outbox holds the rest and bounds it).
///
/// Public as SPI, its calls `@inlinable`: they are specialized for the protocol's message type where
/// the protocol makes the writer (run as generic code from RealtimeCore, each batch's messages went
/// through value witnesses and generic metadata lookups).
@_spi(RealtimeEngine) public final class OutboxWebSocketWriter<Message: OutboxMessage>: Sendable {
    /// The outcome of one batch, on the event loop: the messages written, those not written (from
    /// the first that failed), and the failure.
    public typealias Written = @Sendable (_ written: ArraySlice<Message>, _ unwritten: ArraySlice<Message>, _ failure: (any Error)?) -> Void

    @usableFromInline let outbox: Outbox<Message>
    @usableFromInline let writer: WebSocketLoopWriter
    @usableFromInline let generation: Int
    @usableFromInline let encode: @Sendable (Message, inout [RealtimeMessage]) -> Void
    @usableFromInline let written: Written
    @usableFromInline let inFlight: NIOLoopBoundBox<Bool>

    /// - Parameters:
    ///   - encode: appends the WebSocket messages one outbox message is written as, in order.
    ///   - written: called once per batch, on the event loop; it settles the batch with the outbox
    ///     (`wroteUnconfirmed`, `requeueFront`, `finishedWrite`).
    @inlinable
    public init(
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
    @inlinable
    public func start() {
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
    @inlinable
    public func stop() {
        outbox.setWake(nil)
    }

    /// On the event loop: takes and writes the next batch unless one is in flight or the socket is
    /// full. Once the connection is closed a batch is still taken: its write fails at once and the
    /// `written` callback settles it (a writer that waited for room here, its senders would wait
    /// for a socket that is gone).
    @inlinable
    func drain() {
        guard !inFlight.value, writer.isWritable || writer.isClosed, let batch = outbox.takeNow(maxBytes: .max, generation: generation) else {
            return
        }
        inFlight.value = true
        var messages: [RealtimeMessage] = []
        messages.reserveCapacity(batch.count)
        // ends[i]: how many WebSocket messages the first i + 1 outbox messages make; nil while
        // each made one.
        var ends: [Int]?
        var index = 0
        for position in batch.indices {
            encode(batch[position], &messages)
            if ends == nil, messages.count != index + 1 { ends = Array(1..<(index + 1)) }
            ends?.append(messages.count)
            index += 1
        }
        writer.write(messages) { [self] count, failure in
            let whole = ends.map { $0.firstIndex { $0 > count } ?? batch.count } ?? min(count, batch.count)
            inFlight.value = false
            written(batch[..<whole], batch[whole...], failure)
            if failure == nil { drain() }
        }
    }
}
