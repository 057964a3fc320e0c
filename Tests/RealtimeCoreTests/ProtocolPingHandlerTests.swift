import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOWebSocket
@_spi(RealtimeEngine) @testable import RealtimeCore
import Testing

/// A protocol's keep-alive messages on the event loop (SignalR's Ping, Engine.IO's ping and pong):
/// only a frame that is exactly the peer's ping is consumed there; everything else reaches the
/// reader unchanged, and our own ping never splits a fragmented message or follows our close frame.
@Suite struct ProtocolPingHandlerTests {
    static let signalRPing = WebSocketProtocolPing.Message(Array("{\"type\":6}\u{1e}".utf8), binary: false)
    static let pong = WebSocketProtocolPing.Message(Array("3".utf8), binary: false)

    final class Setup {
        let channel = EmbeddedChannel()
        let heard = NIOLockedValueBox(0)
        let sender: ProtocolPingSender

        init(peerPing: WebSocketProtocolPing.Message = signalRPing, reply: WebSocketProtocolPing.Message? = nil) throws {
            let heard = heard
            let handler = ProtocolPingHandler(WebSocketProtocolPing(peerPing: peerPing, reply: reply, ownPing: ProtocolPingHandlerTests.signalRPing) {
                heard.withLockedValue { $0 += 1 }
                return true
            })
            try channel.pipeline.syncOperations.addHandler(handler)
            sender = handler.sender(on: channel.eventLoop)
        }

        func inbound(_ frame: WebSocketFrame) throws -> WebSocketFrame? {
            try channel.writeInbound(frame)
            return try channel.readInbound(as: WebSocketFrame.self)
        }

        func outbound() throws -> [WebSocketFrame] {
            var frames: [WebSocketFrame] = []
            while let frame = try channel.readOutbound(as: WebSocketFrame.self) { frames.append(frame) }
            return frames
        }
    }

    static func frame(_ text: String, opcode: WebSocketOpcode = .text, fin: Bool = true, rsv1: Bool = false) -> WebSocketFrame {
        WebSocketFrame(fin: fin, rsv1: rsv1, opcode: opcode, data: ByteBuffer(string: text))
    }

    /// The payload as written to the encoder (which masks it with the frame's key on the way out).
    static func text(_ frame: WebSocketFrame) -> String { String(buffer: frame.data) }

    @Test func thePeersPingIsConsumedAndCountsAsHeard() throws {
        let setup = try Setup()
        #expect(try setup.inbound(Self.frame("{\"type\":6}\u{1e}")) == nil, "not passed to the reader")
        #expect(setup.heard.withLockedValue { $0 } == 1)
        #expect(try setup.outbound().isEmpty, "no reply configured")
    }

    @Test func aReplyGoesOutAtOnce() throws {
        let setup = try Setup(peerPing: WebSocketProtocolPing.Message(Array("2".utf8), binary: false), reply: Self.pong)
        #expect(try setup.inbound(Self.frame("2")) == nil)
        let replies = try setup.outbound()
        #expect(replies.map(Self.text) == ["3"])
        #expect(replies.first?.opcode == .text)
        #expect(replies.first?.maskKey != nil, "a client frame is masked")
    }

    /// Frames that look like a ping but are not one whole, uncompressed ping message.
    @Test(arguments: [
        ("{\"type\":6}\u{1e}{\"type\":1,\"target\":\"a\",\"arguments\":[]}\u{1e}", WebSocketOpcode.text, false, "more than a ping"),
        ("{\"type\": 6}\u{1e}", .text, false, "other spacing"),
        ("{\"type\":6}\u{1e}", .binary, false, "a binary frame, the ping being text"),
        ("{\"type\":6}\u{1e}", .text, true, "a compressed frame (rsv1)"),
    ])
    func otherFramesReachTheReader(text: String, opcode: WebSocketOpcode, rsv1: Bool, what: String) throws {
        let setup = try Setup()
        let frame = Self.frame(text, opcode: opcode, rsv1: rsv1)
        #expect(try setup.inbound(frame) == frame, "\(what)")
        #expect(setup.heard.withLockedValue { $0 } == 0)
    }

    @Test func aPingShapedPartOfAFragmentedMessageIsNotConsumed() throws {
        let setup = try Setup()
        let first = Self.frame("[", fin: false)
        let middle = Self.frame("{\"type\":6}\u{1e}", opcode: .continuation, fin: false)
        let last = Self.frame("{\"type\":6}\u{1e}", opcode: .continuation)
        #expect(try setup.inbound(first) == first)
        #expect(try setup.inbound(middle) == middle)
        #expect(try setup.inbound(last) == last)
        #expect(setup.heard.withLockedValue { $0 } == 0)
        // The message is over: the next whole ping is the peer's again.
        #expect(try setup.inbound(Self.frame("{\"type\":6}\u{1e}")) == nil)
        #expect(setup.heard.withLockedValue { $0 } == 1)
    }

    @Test func ourPingIsWrittenMaskedBetweenMessages() throws {
        let setup = try Setup()
        setup.sender.send()
        let frames = try setup.outbound()
        #expect(frames.map(Self.text) == ["{\"type\":6}\u{1e}"])
        #expect(frames.first?.fin == true)
        #expect(frames.first?.maskKey != nil)
    }

    @Test func ourPingWaitsForAFragmentedMessageToEnd() throws {
        let setup = try Setup()
        try setup.channel.writeOutbound(Self.frame("part one ", fin: false))
        setup.sender.send()
        setup.sender.send()
        try setup.channel.writeOutbound(Self.frame("part two", opcode: .continuation))
        let frames = try setup.outbound()
        #expect(frames.map(\.opcode) == [.text, .continuation, .text], "the ping follows the message, once")
        #expect(frames.last.map(Self.text) == "{\"type\":6}\u{1e}")
    }

    @Test func nothingFollowsOurCloseFrame() throws {
        let setup = try Setup()
        try setup.channel.writeOutbound(WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03, 0xE8])))
        setup.sender.send()
        #expect(try setup.outbound().map(\.opcode) == [.connectionClose])
        // And no reply to a peer's ping either.
        let withReply = try Setup(peerPing: WebSocketProtocolPing.Message(Array("2".utf8), binary: false), reply: Self.pong)
        try withReply.channel.writeOutbound(WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03, 0xE8])))
        _ = try withReply.inbound(Self.frame("2"))
        #expect(try withReply.outbound().map(\.opcode) == [.connectionClose])
    }
}

/// The same shortcut where an uncompressed connection has it: the reader cuts the socket's bytes
/// into frames and offers each whole data frame outside a fragmented message to the ping handler;
/// everything else becomes a message, and the keep-alive's pongs are counted there.
@Suite struct ProtocolPingThroughTheReaderTests {
    final class Setup {
        let channel = EmbeddedChannel()
        let heard = NIOLockedValueBox(0)
        let counts = NIOLockedValueBox(WebSocketKeepAliveCounts())
        let reader: WebSocketReadHandler

        init() throws {
            let heard = heard
            let ping = ProtocolPingHandler(
                WebSocketProtocolPing(peerPing: WebSocketProtocolPing.Message(Array("2".utf8), binary: false), reply: ProtocolPingHandlerTests.pong, ownPing: nil) {
                    heard.withLockedValue { $0 += 1 }
                    return true
                },
                interceptsFrames: false)
            reader = WebSocketReadHandler(maxMessageSize: 1 << 20, validateUTF8: true, timers: TimerQueue(clock: .continuous))
            reader.protocolPing = ping
            reader.keepAliveCounts = counts
            try channel.pipeline.syncOperations.addHandler(ping)
            try channel.pipeline.syncOperations.addHandler(reader)
        }

        /// Writes the bytes as one read; the text messages the reader handed over since.
        func read(_ bytes: [UInt8]) throws -> [String] {
            try channel.writeInbound(ByteBuffer(bytes: bytes))
            return reader.messages.takeOrPark()?.map { message -> String in
                if case .text(let bytes) = message { return String(buffer: bytes) }
                return "binary"
            } ?? []
        }

        func outbound() throws -> [WebSocketFrame] {
            var frames: [WebSocketFrame] = []
            while let frame = try channel.readOutbound(as: WebSocketFrame.self) { frames.append(frame) }
            return frames
        }
    }

    static func text(_ string: String, fin: Bool = true, opcode: UInt8 = 1) -> [UInt8] {
        let bytes = Array(string.utf8)
        return [(fin ? 0x80 : 0) | opcode, UInt8(bytes.count)] + bytes
    }

    @Test func thePeersPingIsAnsweredAndNotAMessage() throws {
        let setup = try Setup()
        #expect(try setup.read(Self.text("a") + Self.text("2") + Self.text("b")) == ["a", "b"])
        #expect(setup.heard.withLockedValue { $0 } == 1)
        #expect(try setup.outbound().map(ProtocolPingHandlerTests.text) == ["3"])
    }

    @Test func aPingShapedFragmentIsPartOfItsMessage() throws {
        let setup = try Setup()
        let message = Self.text("4", fin: false) + Self.text("2", opcode: 0)
        #expect(try setup.read(message) == ["42"])
        #expect(setup.heard.withLockedValue { $0 } == 0)
        #expect(try setup.outbound().isEmpty)
    }

    @Test func aPingCutAcrossReadsIsStillThePing() throws {
        let setup = try Setup()
        #expect(try setup.read([0x81]) == [])
        #expect(try setup.read([0x01, 0x32]) == [])
        #expect(setup.heard.withLockedValue { $0 } == 1)
    }

    @Test func pongsAreCountedAndNotMessages() throws {
        let setup = try Setup()
        #expect(try setup.read([0x8A, 0] + Self.text("x") + [0x8A, 1, 0x21]) == ["x"])
        #expect(setup.counts.withLockedValue { $0.pongs } == 2)
    }
}
