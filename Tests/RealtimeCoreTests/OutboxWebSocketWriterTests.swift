import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOWebSocket
@_spi(RealtimeEngine) @testable import RealtimeCore
import Testing

/// The outbox written from the event loop (no writing task): on an `EmbeddedChannel` holding the
/// loop writer's handler, so every step is observable.
@Suite("OutboxWebSocketWriter")
struct OutboxWebSocketWriterTests {
    struct Note: OutboxMessage {
        let text: String
        var outboxSize: Int { text.utf8.count }
        var outboxParts: Int { 1 }
        var isApplicationData: Bool { true }
    }

    struct Batch: Equatable {
        var written: [String]
        var unwritten: [String]
        var failed: Bool
    }

    final class Setup {
        let channel: EmbeddedChannel
        let outbox = Outbox<Note>(window: .standard)
        let batches = NIOLockedValueBox<[Batch]>([])
        let writer: OutboxWebSocketWriter<Note>

        /// - Parameters:
        ///   - parts: the WebSocket messages each note is written as (`text:1`, `text:2`... past one).
        ///   - failAfter: writes past this many fail (a connection that broke in the middle of a batch).
        init(parts: Int = 1, failAfter: Int? = nil) throws {
            let channel = EmbeddedChannel()
            let handler = LoopWriteHandler()
            if let failAfter { try channel.pipeline.syncOperations.addHandler(FailingWrites(after: failAfter)) }
            try channel.pipeline.syncOperations.addHandler(MaskingFrameEncoder())
            try channel.pipeline.syncOperations.addHandler(handler)
            try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 1)).wait()
            self.channel = channel
            let (outbox, batches) = (outbox, batches)
            writer = OutboxWebSocketWriter(
                outbox: outbox, writer: handler.writer(on: channel.eventLoop), generation: outbox.generation,
                encode: { note, messages in
                    if parts == 1 { return messages.append(.text(note.text)) }
                    for part in 1...parts { messages.append(.text("\(note.text):\(part)")) }
                },
                written: { written, unwritten, failure in
                    batches.withLockedValue { $0.append(Batch(written: written.map(\.text), unwritten: unwritten.map(\.text), failed: failure != nil)) }
                    outbox.wroteUnconfirmed(written)
                    if failure != nil { outbox.requeueFront(Array(unwritten)) }
                    outbox.finishedWrite()
                })
            writer.start()
            channel.embeddedEventLoop.run()
        }

        /// The text frames written so far (one write each), each checked to be a whole masked
        /// text frame, unmasked.
        func frames() throws -> [String] {
            var texts: [String] = []
            while var bytes = try channel.readOutbound(as: ByteBuffer.self) {
                // RFC 6455 section 5.2, for the lengths these tests write (under 126 bytes).
                let header = bytes.readBytes(length: 6) ?? []
                try #require(header.count == 6)
                #expect(header[0] == 0x81, "a whole text frame")
                #expect(header[1] & 0x80 != 0, "a client frame is masked")
                let key = header[2...].map { $0 }
                let masked = bytes.readBytes(length: Int(header[1] & 0x7F)) ?? []
                #expect(masked.count == Int(header[1] & 0x7F))
                #expect(bytes.readableBytes == 0, "one frame per write")
                texts.append(String(decoding: masked.enumerated().map { $0.element ^ key[$0.offset % 4] }, as: UTF8.self))
            }
            return texts
        }
    }

    @Test("a push is written at once, in order, masked, with no task waiting for it")
    func writesAsQueued() throws {
        let setup = try Setup()
        setup.outbox.push(Note(text: "a"))
        setup.outbox.push(Note(text: "b"))
        setup.channel.embeddedEventLoop.run()
        #expect(try setup.frames() == ["a", "b"])
        #expect(setup.batches.withLockedValue { $0 } == [
            Batch(written: ["a"], unwritten: [], failed: false), Batch(written: ["b"], unwritten: [], failed: false),
        ])
        #expect(setup.outbox.queuedCount == 0)
    }

    /// Lets the first `after` writes through and fails the rest.
    final class FailingWrites: ChannelOutboundHandler {
        typealias OutboundIn = ByteBuffer
        var left: Int
        init(after: Int) { left = after }
        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            guard left > 0 else { return promise?.fail(ChannelError.ioOnClosedChannel) ?? () }
            left -= 1
            context.write(data, promise: promise)
        }
    }

    /// A batch that breaks in the middle: the messages whose every WebSocket message went out are
    /// written, the rest (from the first with a failed part) unwritten, for one part or several.
    @Test("a write that fails in the middle of a batch splits it at the first message not wholly written",
          arguments: [(1, 2, ["a", "b"]), (2, 3, ["a"]), (2, 4, ["a", "b"]), (3, 0, [])])
    func failureInTheMiddle(parts: Int, failAfter: Int, written: [String]) throws {
        let setup = try Setup(parts: parts, failAfter: failAfter)
        setup.channel.isWritable = false
        setup.channel.pipeline.fireChannelWritabilityChanged()
        for text in ["a", "b", "c"] { setup.outbox.push(Note(text: text)) }
        setup.channel.isWritable = true
        setup.channel.pipeline.fireChannelWritabilityChanged()
        setup.channel.embeddedEventLoop.run()
        let unwritten = ["a", "b", "c"].filter { !written.contains($0) }
        #expect(setup.batches.withLockedValue { $0 } == [Batch(written: written, unwritten: unwritten, failed: true)])
        #expect(setup.outbox.queuedCount == unwritten.count, "the unwritten ones are queued again, in order")
    }

    @Test("a full socket holds the queue; once writable, everything queued meanwhile goes in one batch")
    func waitsForWritability() throws {
        let setup = try Setup()
        setup.channel.isWritable = false
        setup.channel.pipeline.fireChannelWritabilityChanged()
        for text in ["c", "d", "e"] { setup.outbox.push(Note(text: text)) }
        setup.channel.embeddedEventLoop.run()
        #expect(try setup.frames() == [], "nothing is taken while the socket is full")
        #expect(setup.outbox.queuedCount == 3)

        setup.channel.isWritable = true
        setup.channel.pipeline.fireChannelWritabilityChanged()
        setup.channel.embeddedEventLoop.run()
        #expect(try setup.frames() == ["c", "d", "e"])
        #expect(setup.batches.withLockedValue { $0 } == [Batch(written: ["c", "d", "e"], unwritten: [], failed: false)])
    }

    /// A push after the channel closed is settled at once as not written (a sender waiting for its
    /// write learns now, not when the session is torn down), and the outbox hands it back.
    @Test("after the channel closed a push is settled at once as unwritten; the outbox hands it back")
    func closedChannelKeepsTheRest() throws {
        let setup = try Setup()
        setup.outbox.push(Note(text: "sent"))
        setup.channel.embeddedEventLoop.run()
        #expect(try setup.frames() == ["sent"])
        _ = try setup.channel.finish()
        setup.outbox.push(Note(text: "after the close"))
        setup.channel.embeddedEventLoop.run()
        #expect(setup.batches.withLockedValue { $0.last } == Batch(written: [], unwritten: ["after the close"], failed: true))
        let unsent = setup.outbox.takeUnsent()
        #expect(unsent.unwritten.map(\.text) == ["after the close"])
        #expect(unsent.written.map(\.text) == ["sent"], "written and not confirmed: kept for the protocol")
    }

    @Test("after our close frame no message follows it: a push is settled as unwritten and kept")
    func nothingAfterTheCloseFrame() throws {
        let setup = try Setup()
        var reason = setup.channel.allocator.buffer(capacity: 2)
        reason.write(webSocketErrorCode: .normalClosure)
        try setup.channel.writeOutbound(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: reason))
        _ = try setup.channel.readOutbound(as: ByteBuffer.self)
        setup.outbox.push(Note(text: "late"))
        setup.channel.embeddedEventLoop.run()
        #expect(try setup.frames() == [])
        #expect(setup.batches.withLockedValue { $0.last } == Batch(written: [], unwritten: ["late"], failed: true))
        #expect(setup.outbox.queuedCount == 1, "kept for the next connection")
    }

    @Test("stop: pushes no longer wake the writer")
    func stop() throws {
        let setup = try Setup()
        setup.writer.stop()
        setup.outbox.push(Note(text: "queued"))
        setup.channel.embeddedEventLoop.run()
        #expect(try setup.frames() == [])
        #expect(setup.outbox.queuedCount == 1)
    }
}
