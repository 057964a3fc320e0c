import NIOCore
import NIOEmbedded
@testable import RealtimeCore
import Testing

/// Flush coalescing holds flushes only while flushes come densely (a burst of sends); a lone frame
/// (a ping, a reply), which the frame encoder writes as a header and a payload a moment apart,
/// leaves at once. A burst gap of a second makes "densely" independent of the test's speed.
@Suite struct FlushCoalescingTests {
    static func frame(_ channel: EmbeddedChannel) {
        channel.write(IOData.byteBuffer(ByteBuffer(bytes: [0x81, 0x0B])), promise: nil)
        channel.write(IOData.byteBuffer(ByteBuffer(string: "{\"type\":6}\u{1e}")), promise: nil)
        channel.flush()
    }

    static func written(_ channel: EmbeddedChannel) throws -> Int {
        var count = 0
        while let data = try channel.readOutbound(as: IOData.self) { count += data.readableBytes }
        return count
    }

    @Test func aLoneFrameOfSeveralWritesIsFlushedAtOnceAndABurstIsHeld() throws {
        let channel = EmbeddedChannel(handler: FlushCoalescingHandler(burstGap: .seconds(1)))
        Self.frame(channel)
        // No loop turn has run: the first frame went out with its own flush.
        #expect(try Self.written(channel) == 13, "a lone frame is not held")
        Self.frame(channel)
        #expect(try Self.written(channel) == 0, "a second flush within the burst gap waits for the loop's turns")
        channel.embeddedEventLoop.run()
        #expect(try Self.written(channel) == 13, "and goes out once the turns ran with no new write")
        _ = try channel.finish()
    }
}
