@_spi(RealtimeEngine) import RealtimeCore
@testable import SignalRHub
import Testing

/// The framer holds a message's bytes only until the message is complete: storage a large message
/// grew is released once it has been handed on, so a quiet connection keeps at most 4 KiB here.
@Suite("Framer memory")
struct HubMessageFramerMemoryTests {
    static func framed(_ kind: HubProtocolType, size: Int) -> [UInt8] {
        let message = HubMessage.invocation(HubInvocation(target: "news", arguments: [.string(String(repeating: "b", count: size))]))
        return HubProtocolCodec(kind).encode(message)
    }

    @Test("A 48 KiB or 256 KiB message, whole or in 1 KiB pieces: delivered, then at most 4 KiB kept", arguments: HubProtocolType.allCases)
    func largeMessageStorageIsReleased(_ kind: HubProtocolType) throws {
        for (size, pieceSize) in [(48, Int.max), (48, 1024), (256, Int.max), (256, 1024)] {
            let bytes = Self.framed(kind, size: size * 1024)
            var framer = HubMessageFramer(kind)
            var delivered: [Int] = []
            var start = 0
            while start < bytes.count {
                let end = pieceSize >= bytes.count - start ? bytes.count : start + pieceSize
                try framer.consume(bytes[start..<end]) { delivered.append($0.count) }
                if end < bytes.count { #expect(framer.bufferedByteCount == end, "an incomplete message is kept whole") }
                start = end
            }
            #expect(delivered.count == 1)
            #expect(framer.bufferedByteCount == 0)
            #expect(framer.retainedCapacity <= 4096, "\(framer.retainedCapacity) bytes kept after a \(bytes.count)-byte message")
            // Small messages afterwards reuse small storage.
            let small = Self.framed(kind, size: 10)
            try framer.consume(small) { delivered.append($0.count) }
            #expect(delivered.count == 2)
            #expect(framer.retainedCapacity <= 4096)
        }
    }
}

/// The inbound pipeline lets go of what it decoded once it is handled: an idle connection does not
/// hold the last messages it received (a large argument stayed until the next read before).
@Suite("Inbound pipeline memory")
struct InboundPipelineMemoryTests {
    @Test("After a read of large messages, the pipeline holds none of them", arguments: HubProtocolType.allCases)
    func handledMessagesAreNotHeld(_ kind: HubProtocolType) throws {
        let connection = HubConnectionBuilder().withUrl(url: "http://127.0.0.1:1/hub").withHubProtocol(hubProtocol: kind).build()
        let run = SessionRun()
        run.markHandshakeDone()
        let session = HubConnection.Session(generation: 0, transport: .webSockets, outbox: HubOutbox(replay: nil), close: { _ in }, run: run)
        var pipeline = InboundPipeline(connection: connection, session: session, run: run, ready: OneShot())
        let bytes = HubMessageFramerMemoryTests.framed(kind, size: 128 * 1024) + HubMessageFramerMemoryTests.framed(kind, size: 64 * 1024)
        let outcome = try bytes.withUnsafeBytes { try pipeline.feed($0) }
        #expect(outcome == .goOn)
        #expect(pipeline.heldMessageCount == 0)
    }
}
