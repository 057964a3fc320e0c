// The shape of IKEventSource's sample app (EventSourceSample/ViewController.swift): a view
// controller that owns the source, updates its labels from the callbacks (which run on the main
// queue) and reconnects from onComplete after retryTime. UIKit is stubbed below.
import Foundation
import IKEventSource

@MainActor class UIViewController {
    func viewDidLoad() {}
    func viewDidAppear(_ animated: Bool) {}
}

struct UIColor {
    let red, green, blue, alpha: Double
    init(red: Double, green: Double, blue: Double, alpha: Double) {
        (self.red, self.green, self.blue, self.alpha) = (red, green, blue, alpha)
    }
}

@MainActor final class UILabel {
    var text: String?
    var backgroundColor: UIColor?
}

final class ViewController: UIViewController {
    private var status = UILabel()
    private var dataLabel = UILabel()
    private var nameLabel = UILabel()
    private var idLabel = UILabel()
    var eventSource: EventSource?

    override func viewDidLoad() {
        super.viewDidLoad()

        let serverURL = URL(string: "http://127.0.0.1:8080/sse")!
        eventSource = EventSource(url: serverURL, headers: ["Authorization": "Bearer basic-auth-token"])

        eventSource?.onOpen { [weak self] in
            self?.status.backgroundColor = UIColor(red: 166 / 255, green: 226 / 255, blue: 46 / 255, alpha: 1)
            self?.status.text = "CONNECTED"
        }

        eventSource?.onComplete { [weak self] statusCode, reconnect, error in
            self?.status.backgroundColor = UIColor(red: 249 / 255, green: 38 / 255, blue: 114 / 255, alpha: 1)
            self?.status.text = "DISCONNECTED"

            guard reconnect ?? false else { return }

            let retryTime = self?.eventSource?.retryTime ?? 3000
            DispatchQueue.main.asyncAfter(deadline: .now() + .milliseconds(retryTime)) { [weak self] in
                self?.eventSource?.connect()
            }
        }

        eventSource?.onMessage { [weak self] id, event, data in
            self?.updateLabels(id, event: event, data: data)
        }

        eventSource?.addEventListener("user-connected") { [weak self] id, event, data in
            self?.updateLabels(id, event: event, data: data)
        }
    }

    func updateLabels(_ id: String?, event: String?, data: String?) {
        idLabel.text = id
        nameLabel.text = event
        dataLabel.text = data
    }

    func disconnect(_ sender: Any) {
        eventSource?.disconnect()
    }

    func connect(_ sender: Any) {
        eventSource?.connect()
    }
}
