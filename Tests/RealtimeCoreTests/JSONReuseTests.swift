@testable import RealtimeCore
import Testing

/// Parsing with a string the input is likely to hold (an event's name) gives the same value as
/// parsing without it, whether the input holds that string, another of the same length, a longer
/// or shorter one, or the same text escaped.
@Suite struct JSONReuseTests {
    @Test(arguments: [
        (#"["tick",1]"#, "tick"),
        (#"["tock",1]"#, "tick"),
        (#"["tick",1]"#, "tic"),
        (#"["ti",1]"#, "tick"),
        (#"["ti\u0063k",1]"#, "tick"),
        (#"["",{"tick":"tick"}]"#, "tick"),
        (#"["",1]"#, ""),
        (#"["a fairly long event name, past fifteen bytes",1]"#, "a fairly long event name, past fifteen bytes"),
        (#"["a fairly long event name, past fifteen bytez",1]"#, "a fairly long event name, past fifteen bytes"),
        (#"["é€",1]"#, "é€"),
    ])
    func reusingGivesTheSameValue(_ text: String, _ known: String) throws {
        let bytes = Array(text.utf8)
        let plain = try bytes.withUnsafeBytes { try JSONReader.parse($0) }
        let reused = try bytes.withUnsafeBytes { try JSONReader.parse($0, reusing: known) }
        #expect(reused == plain)
    }
}
