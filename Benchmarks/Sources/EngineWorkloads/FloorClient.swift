import NIOCore
import NIOPosix
import RealtimeCore

/// The floor of a client's inbound cost: a bare NIO channel that reads the same stream from the same
/// server as a client does, and only counts, with no protocol work. It sends what it must for the
/// server to start (the WebSocket upgrade, then the protocol's few requests, written as fixed
/// bytes), then counts the frames of the stream (or, for SSE, the blank lines that end events) and
/// the reads that carried them. What a client costs per message above this is the client's own.
///
/// - `socketio`: waits for the Engine.IO open packet, sends `40`, waits for the namespace's answer,
///   sends `42["count",N]`, answers pings, counts the frames that start with `42`.
/// - `signalr` / `signalr-on`: sends the JSON handshake, waits for its answer, then invokes the
///   stream `countTo(N)` (or `pushMany(N)` with `signalr-on`) and counts the frames until the
///   completion.
/// - `sse`: sends the GET, counts events until the `done` event or N.
///
/// With `handOff`, each read's count is handed to a task that waits for it (an `AsyncStream`,
/// resumed from the event loop), on Swift Concurrency's default executor or preferring the channel's
/// event loop: the floor of any client that delivers a read's messages to a waiting task, with no
/// protocol work.
enum FloorClient {
    enum HandOff: String { case none, task, loop }

    enum Kind: String { case socketio, signalr, signalrOn = "signalr-on", sse }

    /// Reads N messages; returns the messages counted and the reads that carried them.
    static func run(_ kind: Kind, url: String, count: Int, handOff: HandOff = .none) async throws -> (messages: Int, reads: Int) {
        guard let parsed = ParsedURL(url) else { throw FloorError("not an http URL: \(url)") }
        let loop = MultiThreadedEventLoopGroup.singleton.next()
        let done = loop.makePromise(of: (Int, Int).self)
        let (counts, feed) = AsyncStream.makeStream(of: Int.self)
        let consumer: Task<Int, Never>?
        switch handOff {
        case .none: consumer = nil
        case .task: consumer = Task.detached { await counts.reduce(0, +) }
        case .loop: consumer = Task.detached(executorPreference: EventLoopTaskExecutor(loop)) { await counts.reduce(0, +) }
        }
        let channel = try await ClientBootstrap(group: loop)
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        Counter(kind: kind, count: count, url: parsed, done: done, feed: handOff == .none ? nil : feed))
                }
            }
            .connect(host: parsed.host, port: parsed.port)
            .get()
        let result = try await done.futureResult.get()
        feed.finish()
        if let consumer, await consumer.value != result.0 { throw FloorError("the consumer was handed \(await consumer.value) of \(result.0)") }
        try? await channel.close()
        return result
    }

    struct FloorError: Error, CustomStringConvertible {
        let description: String
        init(_ description: String) { self.description = description }
    }

    struct ParsedURL {
        let host: String
        let port: Int
        let path: String
        init?(_ url: String) {
            guard url.hasPrefix("http://") else { return nil }
            let rest = url.dropFirst(7)
            let authority = rest.prefix { $0 != "/" }
            path = rest.count > authority.count ? String(rest.dropFirst(authority.count)) : "/"
            let parts = authority.split(separator: ":")
            host = String(parts[0])
            port = parts.count > 1 ? Int(parts[1]) ?? 80 : 80
        }
    }

    private final class Counter: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        let kind: Kind
        let count: Int
        let url: ParsedURL
        let done: EventLoopPromise<(Int, Int)>
        /// Bytes not yet parsed (a frame or an event split across reads).
        var pending = ByteBuffer()
        var headDone = false
        /// Protocol steps taken before the counted stream (the requests sent).
        var step = 0
        var messages = 0
        var reads = 0
        var finished = false
        /// SSE: the byte before the current one was a newline.
        var lastWasNewline = false
        /// Where each read's count goes (`handOff`).
        let feed: AsyncStream<Int>.Continuation?

        init(kind: Kind, count: Int, url: ParsedURL, done: EventLoopPromise<(Int, Int)>, feed: AsyncStream<Int>.Continuation?) {
            self.kind = kind
            self.count = count
            self.url = url
            self.done = done
            self.feed = feed
        }

        func channelActive(context: ChannelHandlerContext) {
            var request: String
            switch kind {
            case .sse:
                request = "GET \(url.path) HTTP/1.1\r\nHost: \(url.host)\r\nAccept: text/event-stream\r\n\r\n"
            case .socketio:
                request = "GET /socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n"
            case .signalr, .signalrOn:
                request = "GET \(url.path) HTTP/1.1\r\n"
            }
            if kind != .sse {
                request += "Host: \(url.host)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                request += "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            }
            context.writeAndFlush(wrapOutboundOut(ByteBuffer(string: request)), promise: nil)
            if kind == .signalr || kind == .signalrOn { send(#"{"protocol":"json","version":1}"# + "\u{1e}", context) }
        }

        /// A masked text frame (mask key zero, so the payload goes as it is).
        func send(_ text: String, _ context: ChannelHandlerContext) {
            let payload = Array(text.utf8)
            var buffer = context.channel.allocator.buffer(capacity: payload.count + 8)
            buffer.writeInteger(UInt8(0x81))
            if payload.count < 126 {
                buffer.writeInteger(UInt8(0x80 | payload.count))
            } else {
                buffer.writeInteger(UInt8(0x80 | 126))
                buffer.writeInteger(UInt16(payload.count))
            }
            buffer.writeInteger(UInt32(0))
            buffer.writeBytes(payload)
            context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var bytes = unwrapInboundIn(data)
            if finished { return }
            if headDone, step >= 2 || kind == .sse { reads += 1 }
            if pending.readableBytes == 0 { pending = bytes } else { pending.writeBuffer(&bytes) }
            if !headDone {
                guard let end = pending.readableBytesView.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
                pending.moveReaderIndex(to: end.upperBound)
                headDone = true
                if kind == .sse { step = 2 }
            }
            let before = messages
            if kind == .sse { countEvents() } else { countFrames(context) }
            if let feed, messages > before { feed.yield(messages - before) }
            if messages >= count || finished {
                finished = true
                done.succeed((messages, reads))
            }
        }

        /// SSE: an event ends at a blank line; the `done` event ends the stream.
        func countEvents() {
            let view = pending.readableBytesView
            var previous = lastWasNewline
            for byte in view {
                if byte == UInt8(ascii: "\n") {
                    if previous { messages += 1 }
                    previous = true
                } else if byte != UInt8(ascii: "\r") {
                    previous = false
                }
            }
            lastWasNewline = previous
            if view.count >= 10, view.suffix(10).elementsEqual("data: end\n".utf8) || view.suffix(11).elementsEqual("data: end\n\n".utf8) {
                finished = true
            }
            pending.clear()
        }

        /// WebSocket: whole frames in `pending`; the first bytes of each tell what it is.
        func countFrames(_ context: ChannelHandlerContext) {
            while pending.readableBytes >= 2 {
                let start = pending.readerIndex
                let second = pending.getInteger(at: start + 1, as: UInt8.self)!
                var length = Int(second & 0x7F)
                var header = 2
                if length == 126 {
                    guard let extended = pending.getInteger(at: start + 2, as: UInt16.self) else { return }
                    length = Int(extended)
                    header = 4
                } else if length == 127 {
                    guard let extended = pending.getInteger(at: start + 2, as: UInt64.self) else { return }
                    length = Int(extended)
                    header = 10
                }
                guard pending.readableBytes >= header + length else { return }
                if (kind == .signalr || kind == .signalrOn), step >= 2 {
                    // A frame may carry several records (a packed server): each ends with 0x1E.
                    var recordStart = start + header
                    let end = start + header + length
                    pending.withUnsafeReadableBytes { bytes in
                        let base = start - pending.readerIndex
                        for index in (recordStart - start + base)..<(end - start + base) where bytes[index] == 0x1E {
                            let first = recordStart - start + base
                            let prefix = bytes[first..<min(first + 12, index)].filter { $0 != UInt8(ascii: " ") }
                            if prefix.starts(with: #"{"type":3"#.utf8) {
                                finished = true
                            } else if !prefix.starts(with: #"{"type":6"#.utf8) {
                                messages += 1
                            }
                            recordStart = start + (index - base) + 1
                        }
                    }
                    pending.moveReaderIndex(forwardBy: header + length)
                    continue
                }
                // The payload's first bytes, spaces left out (`{"type": 3` and `{"type":3` alike).
                let prefix = pending.getBytes(at: start + header, length: min(length, 12))?.filter { $0 != UInt8(ascii: " ") } ?? []
                pending.moveReaderIndex(forwardBy: header + length)
                handleFrame(prefix, length: length, context)
            }
            if pending.readableBytes == 0 { pending.clear() }
        }

        func handleFrame(_ prefix: [UInt8], length: Int, _ context: ChannelHandlerContext) {
            switch kind {
            case .socketio:
                if step == 0 {  // the open packet
                    step = 1
                    send("40", context)
                } else if step == 1 {  // the namespace's answer
                    step = 2
                    send(#"42["count",\#(count)]"#, context)
                } else if prefix == [UInt8(ascii: "2")] {
                    send("3", context)
                } else if prefix.starts(with: "42".utf8) {
                    messages += 1
                }
            case .signalr, .signalrOn:
                if step == 0 {  // the handshake's answer
                    step = 2
                    if kind == .signalr {
                        send(#"{"type":4,"invocationId":"0","target":"countTo","arguments":[\#(count)]}"# + "\u{1e}", context)
                    } else {
                        send(#"{"type":1,"invocationId":"0","target":"pushMany","arguments":[\#(count)]}"# + "\u{1e}", context)
                    }
                } else if prefix.starts(with: #"{"type":3"#.utf8) {
                    finished = true
                } else if prefix.starts(with: #"{"type":6"#.utf8) {
                    break  // a ping
                } else {
                    messages += 1
                }
            case .sse:
                break
            }
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            if !finished {
                finished = true
                done.fail(error)
            }
            context.close(promise: nil)
        }

        func channelInactive(context: ChannelHandlerContext) {
            if !finished {
                finished = true
                done.succeed((messages, reads))
            }
        }
    }
}
